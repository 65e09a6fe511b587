import pytest

from rankscope.intlist import format_int_list, parse_int_list


def test_round_trip():
    assert parse_int_list("0-3,7") == [0, 1, 2, 3, 7]
    assert format_int_list([7, 0, 1, 2, 3]) == "0-3,7"
    assert format_int_list([2, 4, 5, 6, 9]) == "2,4-6,9"
    assert format_int_list([]) == ""


@pytest.mark.parametrize("bad", ["a", "3-1", "0-99999999", "1,,2"])
def test_bad_specs_are_value_errors(bad):
    with pytest.raises(ValueError):
        parse_int_list(bad)
