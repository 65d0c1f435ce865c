"""A stored failure reason is plain text: no terminal escape sequence or control character
survives :func:`~hyperfleet.platform.controller.outcomes.plain`, and the exception line is
found in a coloured log as in a plain one."""

from __future__ import annotations

import pytest

from hyperfleet.platform.controller.outcomes import plain, raised


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x1b[1mWeights only load failed\x1b[0m", "Weights only load failed"),
        ("\x1b[38;5;196mred\x1b[m and \x9b1mbold\x9b0m", "red and bold"),
        ("\x1b]0;a title\x07text", "text"),
        ("\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1bPq#0;2;0;0;0\x1b\\after", "after"),
        ("\x1b(B\x1bcreset\x1b7saved", "resetsaved"),
        ("50%\r100%\x08\x07 done", "50%100% done"),
        ("tab\tand\nnewline stay; é ü ✓", "tab\tand\nnewline stay; é ü ✓"),
        ("a lone escape at the end\x1b", "a lone escape at the end"),
    ],
)
def test_escape_sequences_and_control_characters_are_removed(text: str, expected: str) -> None:
    assert plain(text) == expected


def test_the_exception_line_of_a_coloured_log() -> None:
    tail = "Traceback ...\n_pickle.UnpicklingError: \x1b[1mWeights only load failed\x1b[0m."
    assert raised(plain(tail)) == "_pickle.UnpicklingError: Weights only load failed."
