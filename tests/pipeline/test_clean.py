"""pipeline/read/clean.py: the byte-level check for control characters agrees with the regex that removes them."""

from __future__ import annotations

from pipeline.read.clean import _CONTROL, clean_text, has_control


def test_has_control_agrees_with_the_regex_on_every_code_point():
    # every code point alone and between two others (lone surrogates as a JSON "\ud800" escape gives them)
    for cp in range(0x110000):
        c = chr(cp)
        expected = _CONTROL.search(c) is not None
        assert has_control(c) is expected, hex(cp)
        assert has_control(f"a{c}\u00e9") is expected, hex(cp)


def test_clean_text_removes_every_control_character_but_tab_and_newline():
    text = "a\x00b\tc\r\nd\x1fe\x7ff\x80g\x9fh\u00a0i\u00bfj\u2028k\U0001f600l\rm"
    assert clean_text(text) == ("ab\tc\nde" + "fgh\u00a0i\u00bfj\u2028k\U0001f600l\nm", True)
    assert clean_text("plain \u00e9t\u00e9\nline") == ("plain \u00e9t\u00e9\nline", False)
    assert clean_text("a\r\nb") == ("a\nb", False)  # line ends alone are no removal
