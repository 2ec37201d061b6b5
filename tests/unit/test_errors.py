"""A file that cannot be read is told in words: --scenario, --events and --spot-trace said
'cannot read (UnicodeDecodeError)' or '(IsADirectoryError)', Python's class names."""

import pytest

from shoal.errors import UserError


def _loaders():
    from shoal.cluster.provider import load_spot_trace
    from shoal.launcher.events import parse_events
    from shoal.sim.scenario import load_scenario

    return {
        "--scenario": load_scenario,
        "--events": parse_events,
        "--spot-trace": load_spot_trace,
    }


@pytest.mark.parametrize("flag", ["--scenario", "--events", "--spot-trace"])
def test_binary_file(flag, tmp_path):
    path = tmp_path / "binary"
    path.write_bytes(b"\xff\xfe\x00\x01garbage\n")
    with pytest.raises(UserError) as info:
        _loaders()[flag](str(path))
    assert str(info.value) == f"{flag} {path}: not UTF-8 text"


@pytest.mark.parametrize("flag", ["--scenario", "--spot-trace"])
def test_directory_and_missing_file(flag, tmp_path):
    with pytest.raises(UserError) as info:
        _loaders()[flag](str(tmp_path))
    assert str(info.value) == f"{flag} {tmp_path}: cannot read (Is a directory)"
    with pytest.raises(UserError) as info:
        _loaders()[flag](str(tmp_path / "none"))
    assert str(info.value) == f"{flag} {tmp_path / 'none'}: cannot read (No such file or directory)"
