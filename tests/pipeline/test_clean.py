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


def _old_rule(line: bytes):
    """What the reader did before parse_json_within_depth: scan, then parse."""
    import json

    from pipeline.read.record_checks import json_depth_exceeds

    if json_depth_exceeds(line):
        return "too deep"
    try:
        return json.loads(line.decode())
    except json.JSONDecodeError as e:
        return f"malformed: {e.msg} at column {e.colno}"


def test_parsing_bracket_heavy_lines_first_gives_the_scans_answers():
    import json

    from pipeline.read.record_checks import parse_json_within_depth

    def nested(depth: int, inner: str = "1") -> str:
        return "[" * (depth - 1) + '{"a": ' + inner + "}" + "]" * (depth - 1)

    lines = [
        '{"text": "' + "[1] cited. " * 300 + '"}',  # brackets only inside the string
        '{"text": "' + "]]]" * 50 + '", "x": ' + nested(100) + "}",  # unbalanced in a string, 101 deep outside
        nested(100),
        nested(101),
        nested(100, '"[[[[' + "{" * 200 + '"'),
        nested(5000),  # past no recursion limit here, but deep
        "[" * 200_000,  # a recursion past Python's limit, and malformed
        "[" * 150 + "1" + "]" * 149,  # deep and malformed
        "[" * 50 + "1" + "]" * 49,  # malformed, shallow
        '{"a": [' + "[], " * 200 + "[]]}",  # many brackets, depth 3
        '{"a": "\\"[[[' + "{" * 120 + '"}',  # escaped quote inside the string
        '"' + "[" * 150 + '"',  # a string, not an object
        # a repeated key: json.loads keeps the last value, the deep one before it is still too deep (attack round)
        '{"id": "a", "text": "hi", "x": ' + "[" * 100 + "]" * 100 + ', "x": 0}',
        '{"x": ' + nested(150) + ', "text": "ok", "x": null}',
        '{"k": {"k": ' + nested(101) + ', "k": 2}}',
        '{"k": {"k": 1, "k": ' + nested(50) + "}, " + '"t": "' + "[" * 120 + '"}',  # repeated, not too deep
    ]
    for line in lines:
        data = line.encode()
        old = _old_rule(data)
        try:
            too_deep, value = parse_json_within_depth(data, line)
            new = "too deep" if too_deep else value
        except json.JSONDecodeError as e:
            new = f"malformed: {e.msg} at column {e.colno}"
        assert new == old, line[:60]


def test_the_depth_of_a_parsed_line_is_read_without_recursion():
    """With little stack left (a deep caller), a valid 120-deep line is still a too-deep line, not a RecursionError
    (json.loads itself needs one level of stack per level; the recursive depth check needed about three)."""
    import inspect
    import sys

    from pipeline.read.record_checks import parse_json_within_depth

    line = "[" * 120 + "]" * 120
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 200)
    try:
        result = parse_json_within_depth(line.encode(), line)
    finally:
        sys.setrecursionlimit(limit)
    assert result == (True, None)
