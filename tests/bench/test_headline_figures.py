"""The headline's figures from what the training leaves behind: pure functions, checked on hand-made samples."""

from __future__ import annotations

import pytest

from kai_ray.bench.headline import StoryConfig, longest_pause, seconds_below, steps_went_back, training_entrypoint


def test_longest_pause_counts_only_gaps_after_the_start() -> None:
    times = [0.0, 1.0, 2.0, 10.0, 11.0, 30.0, 30.5]
    assert longest_pause(times, since=5.0) == 19.0
    assert longest_pause(times, since=31.0) == 0.0


def test_a_counter_that_restarts_from_a_checkpoint_went_back_once() -> None:
    assert steps_went_back([1, 2, 3, 4]) == 0
    assert steps_went_back([1, 2, 3, 4, 2, 3, 5]) == 1


def test_seconds_below_full_size_between_the_marks() -> None:
    history = [[10.0, 3], [20.0, 2], [50.0, 3]]
    assert seconds_below(history, 3, start=15.0, end=60.0) == pytest.approx(30.0)
    assert seconds_below(history, 3, start=15.0, end=30.0) == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("trainer", "script", "storage"),
    [("train-v2", "train_v2.py", "--storage"), ("loop", "train.py", "--checkpoint-dir")],
)
def test_each_trainer_gets_its_own_command_line(trainer: str, script: str, storage: str) -> None:
    line = training_entrypoint(StoryConfig(trainer=trainer, workers=3, compute_seconds=0.3))
    assert line.startswith(f"python /apps/{script} {storage} /checkpoints/headline-train ")
    assert "--max-workers 3" in line and "0.3" in line
