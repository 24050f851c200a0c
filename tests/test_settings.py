"""tensorcom.settings: environment variables, defaults, and errors that name the variable."""

import pytest

from tensorcom import settings


def test_defaults(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "TENSORCOM_MAX_MESSAGE_SIZE", "TENSORCOM_PURE_PYTHON",
                 "TENSORCOM_MAX_PLAIN_VALUES"):
        monkeypatch.delenv(name, raising=False)
    assert settings.rank_and_world_size() == (0, 1)
    assert settings.max_message_size() == settings.DEFAULT_MAX_MESSAGE_SIZE
    assert settings.max_plain_values() == settings.DEFAULT_MAX_PLAIN_VALUES == 1_000_000
    assert settings.tar_accelerator()


def test_values_are_read_on_every_call(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("TENSORCOM_MAX_MESSAGE_SIZE", "1000")
    monkeypatch.setenv("TENSORCOM_PURE_PYTHON", "Yes")
    monkeypatch.setenv("TENSORCOM_MAX_PLAIN_VALUES", "50")
    assert settings.rank_and_world_size() == (2, 4)
    assert settings.max_message_size() == 1000
    assert settings.max_plain_values() == 50
    assert not settings.tar_accelerator()


@pytest.mark.parametrize("name, value, why", [
    ("RANK", "one", "$RANK"),
    ("WORLD_SIZE", "", "$WORLD_SIZE"),
    ("RANK", "3", "RANK=3"),  # not below WORLD_SIZE=1
])
def test_bad_rank_and_world_size_name_the_variable(monkeypatch, name, value, why):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        settings.rank_and_world_size()
    assert why in str(info.value)


def test_bad_max_message_size_names_the_variable(monkeypatch):
    monkeypatch.setenv("TENSORCOM_MAX_MESSAGE_SIZE", "2G")
    with pytest.raises(ValueError, match=r"\$TENSORCOM_MAX_MESSAGE_SIZE.*'2G'"):
        settings.max_message_size()


@pytest.mark.parametrize("value, why", [("1e6", "'1e6'"), ("0", "positive"), ("-5", "positive")])
def test_bad_max_plain_values_names_the_variable(monkeypatch, value, why):
    monkeypatch.setenv("TENSORCOM_MAX_PLAIN_VALUES", value)
    with pytest.raises(ValueError, match=r"\$TENSORCOM_MAX_PLAIN_VALUES") as info:
        settings.max_plain_values()
    assert why in str(info.value)
