"""tensorcom.fieldspec: one field-spec grammar and one missing-field rule for shards, pipeline and CLI."""

import pytest

from tensorcom import shards
from tensorcom.cli import wlcommon
from tensorcom.errors import SampleError
from tensorcom.fieldspec import find_field, parse_fields, pick_field, pick_fields, select_fields
from tensorcom.pipeline import Pipeline

SAMPLE = {"__key__": "k7", "__url__": "data-000.tar", "png": b"p", "cls": 3}


def test_names_are_separated_by_spaces_and_or_commas_and_alternatives_by_semicolons():
    expected = (("jpg", "png"), ("cls",))
    for spec in ("jpg;png cls", "jpg;png,cls", "jpg;png, cls", " jpg;png  cls ", ["jpg;png", "cls"],
                 ["jpg;png cls"], (("jpg", "png"), ("cls",))):
        assert parse_fields(spec) == expected, spec
    assert parse_fields(parse_fields("a b;c")) == (("a",), ("b", "c"))


def test_empty_specs_and_non_text_are_refused_naming_the_caller():
    for spec in ("", " , ", [], ["jpg", ";"]):
        with pytest.raises(ValueError, match="to_tuple needs one or more field names"):
            parse_fields(spec, "to_tuple")
    with pytest.raises(TypeError):
        parse_fields(3)
    with pytest.raises(ValueError, match="one field"):
        find_field(SAMPLE, "jpg cls")


def test_the_one_lookup_takes_the_first_present_alternative():
    assert find_field(SAMPLE, "jpg;png") == ("png", b"p") and find_field(SAMPLE, "JPG;PNG") == ("png", b"p")
    assert find_field(SAMPLE, "txt") is None and pick_field(SAMPLE, "__key__") == "k7"
    assert find_field({"__KEY__": 1}, "__key__") is None  # dunder names only as written


def test_a_missing_field_names_the_field_its_alternatives_the_key_and_the_url():
    with pytest.raises(SampleError) as info:
        pick_field(SAMPLE, "jpg;webp")
    message = str(info.value)
    assert all(word in message for word in ("'jpg;webp'", "'jpg'", "'webp'", "'k7'", "data-000.tar", "'cls'"))
    assert info.value.url == "data-000.tar"


def test_shards_pipeline_and_cli_read_the_same_spec_the_same_way():
    """shards.to_tuple split on spaces only, Pipeline.to_tuple("png cls") raised SampleError, the wl-*
    tools split on commas and spaces: now every one parses with fieldspec."""
    for spec in ("jpg;png cls", "jpg;png,cls"):
        assert shards.to_tuple(SAMPLE, spec) == (b"p", 3)
        assert list(Pipeline([SAMPLE]).to_tuple(spec)) == [(b"p", 3)]
        assert pick_fields(SAMPLE, wlcommon.parse_fields([spec])) == (b"p", 3)
    assert shards.to_tuple(SAMPLE, "jpg;png", "cls") == list(Pipeline([SAMPLE]).to_tuple("jpg;png", "cls"))[0]


def test_select_raises_on_a_missing_field_everywhere_unless_skipping_is_asked_for():
    """Pipeline.select raised on a missing field while the wl-* tools' select_fields skipped it silently."""
    with pytest.raises(SampleError, match="'txt'"):
        list(Pipeline([SAMPLE]).select("cls txt"))
    with pytest.raises(SampleError, match="'txt'"):
        wlcommon.select_fields(SAMPLE, wlcommon.parse_fields(["cls,txt"]))
    counts: dict = {}
    kept = wlcommon.select_fields(SAMPLE, wlcommon.parse_fields(["cls,txt"]), missing="skip", counts=counts)
    assert kept == {"__key__": "k7", "__url__": "data-000.tar", "cls": 3} and counts == {"txt": 1}
    with pytest.raises(ValueError, match="missing"):
        select_fields(SAMPLE, "cls", missing="ignore")


def test_select_keys_a_field_by_its_first_name_or_by_the_name_found():
    assert list(Pipeline([SAMPLE]).select("jpg;png")) == [{"__key__": "k7", "__url__": "data-000.tar", "jpg": b"p"}]
    assert select_fields(SAMPLE, "jpg;png", keys="found")["png"] == b"p"
    assert wlcommon.select_fields(SAMPLE, wlcommon.parse_fields(["jpg;png"]))["png"] == b"p"  # files keep their extension
