"""load_function: the one loader of MODULE:FUNCTION and FILE.py:FUNCTION names (tensorcom serve, wl-map)."""

import pytest

from tensorcom.pipeline.function_spec import load_function


def test_module_and_file_names_resolve(tmp_path):
    assert load_function("os.path:join") is __import__("os").path.join
    assert load_function("os:path.join") is __import__("os").path.join
    script = tmp_path / "spec_helper_file.py"
    script.write_text("def double(x):\n    return 2 * x\n")
    assert load_function(f"{script}:double")(4) == 8


@pytest.mark.parametrize("spec,words", [("nocolon", "must be written"), ("os:nothing_here", "cannot load"),
                                        ("os:sep", "not callable"), ("/no/such/file.py:f", "no file")])
def test_bad_names_say_what_and_which(spec, words):
    with pytest.raises(ValueError, match=words) as info:
        load_function(spec, "-m function")
    assert "-m function" in str(info.value)
