"""A small Inspect task on the envrt sandbox: each sample writes its input into its own
lease, runs a command there, reads the result back, and is scored on it. The envrt.toml
comes from ENVRT_INSPECT_CONFIG (``sandbox="envrt"`` alone when unset)."""

import os

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox


@solver
def shout():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        box = sandbox()
        await box.write_file("input.txt", state.input_text)
        result = await box.exec(["sh", "-c", "tr a-z A-Z < input.txt > output.txt; ls"])
        assert result.success, result.stderr
        # Only this sample's files are in its lease.
        assert result.stdout.split() == ["input.txt", "output.txt"], result.stdout
        state.metadata["shouted"] = await box.read_file("output.txt")
        return state

    return solve


@scorer(metrics=[accuracy()])
def shouted_right():
    async def score(state: TaskState, target: Target) -> Score:
        ok = state.metadata.get("shouted") == target.text
        return Score(value=CORRECT if ok else INCORRECT, answer=state.metadata.get("shouted"))

    return score


@task
def envrt_shout() -> Task:
    config = os.environ.get("ENVRT_INSPECT_CONFIG")
    return Task(
        dataset=[Sample(input=word, target=word.upper()) for word in ("alpha", "beta", "gamma")],
        solver=shout(),
        scorer=shouted_right(),
        sandbox=("envrt", config) if config else "envrt",
    )
