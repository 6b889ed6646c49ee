"""The harness's command line: what the points last, and what it refuses."""

from __future__ import annotations

import pytest

from bench.options import parse_args


def test_the_housekeeping_points_last_eight_seconds_whatever_the_selection_points_last():
    args = parse_args(["--duration", "2"])
    assert (args.duration, args.housekeeping_duration) == (2.0, 8.0)
    assert parse_args(["--housekeeping-duration", "1.5"]).housekeeping_duration == 1.5


def test_a_selection_point_lasts_eight_seconds_by_default():
    # The length the selection targets were set at: 3-s points measured the baselines that walk
    # a wallet in id order on tables fresher than a running service's.
    assert parse_args([]).duration == 8.0


@pytest.mark.parametrize("seconds", ["0", "-1"])
def test_a_housekeeping_point_of_no_time_is_refused(seconds, capsys):
    with pytest.raises(SystemExit) as exited:
        parse_args(["--housekeeping-duration", seconds])
    assert exited.value.code == 2
    assert "--housekeeping-duration must be positive" in capsys.readouterr().err
