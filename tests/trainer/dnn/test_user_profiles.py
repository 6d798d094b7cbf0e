"""CSV profile tables: errors name the line a row starts on, whatever a quote swallowed."""

from __future__ import annotations

import pytest

from trainer.dnn.user_profiles import ProfileTableError, read_profiles

HEADER = "user_id,country,device,age\n"
ROWS = [f"u{i},US,mobile,{20 + i}\n" for i in range(12)]


def table(before: int, odd_row: str) -> str:
    """The header, `before` good rows, `odd_row`, then the other good rows."""
    return HEADER + "".join(ROWS[:before]) + odd_row + "".join(ROWS[before:])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A trial: the unclosed quote on line 6 was reported on the file's last line.
        (
            table(4, 'u9,"US,mobile,3\n'),
            "line 6: a quoted value starting on this line runs on to line 14 (an unclosed quote?)",
        ),
        # With the right number of fields the rest of the file became one value, silently.
        (
            table(1, 'u9,US,mobile,"3\n'),
            "line 3: a quoted value starting on this line runs on to line 14",
        ),
        (HEADER + "u1,US,mobile,3\n\n\nu1,GB,desktop,4\n", "line 5: user 'u1' appears twice"),
        (HEADER + 'u1,"U\nS",mobile,3\n', "line 2: a quoted value starting on this line runs"),
        (HEADER + "u1,US,mobile,3\nu2,US\n", "line 3: wrong number of fields"),
    ],
)
def test_errors_name_the_line_the_row_starts_on(tmp_path, text: str, message: str) -> None:
    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(ProfileTableError) as info:
        read_profiles(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_quoted_values_on_one_line_and_blank_lines_still_read(tmp_path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(HEADER + 'u1,"US",mobile,"3"\n\nu2,"G,B",,4\n')
    assert read_profiles(path) == {
        "u1": {"country": "US", "device": "mobile", "age": "3"},
        "u2": {"country": "G,B", "device": None, "age": "4"},
    }
