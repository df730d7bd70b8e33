"""Copy-edit chat requests the bench never asks: AR against the drafters, side by side in one run.

    python benchmarks/held_out_edits.py [--n 12] [--repeats 2] [--max-tokens 192] [--kernels avx2:avx2]

The bench's `grounded` set edits functions of its own stdlib modules (type hints, a rename) and
its drafting was tuned on those. Here the functions come from other modules (glob, queue, copy,
string, shutil, tempfile, uuid, getopt, ...) and the asks include two the bench lacks (copy adding
a comment above each line, add a docstring): text a user's editor sends, where most of the answer
copies the prompt with changes the drafts cannot know. Each task runs AR, memory_decoding
(`decoding_length 16, dynamic_algo`) and hybrid back to back (each system its own engine and
memory, the order rotating by task), --repeats times, each repeat with new drafter engines; per
task the median tok/s over AR's, per system the median and geometric mean over tasks and the
lowest task. Greedy outputs must equal
AR's (exit status 1 otherwise). For an AVX2 CPU's figures on a machine with more, run it with
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 and --kernels
avx2:avx2 (an emulation: quote ratios, with the CPU flags).
"""

from __future__ import annotations

import argparse
import collections
import copy
import getopt
import glob
import inspect
import queue
import shutil
import statistics
import string
import sys
import tempfile
import textwrap
import uuid

from paraspec import LLM, SamplingParams

FUNCTIONS = (
    glob.glob,
    glob.escape,
    queue.Queue.put,
    copy.deepcopy,
    string.capwords,
    shutil.copyfileobj,
    tempfile.mkdtemp,
    uuid.uuid4,
    getopt.getopt,
    shutil.which,
    queue.Queue.get,
    copy.copy,
    shutil.copytree,
    tempfile.mkstemp,
    getopt.gnu_getopt,
    queue.Queue.join,
)
ASKS = (
    "Add type hints to this function. Reply with the whole function.",
    "Copy this function exactly, adding a comment above each line that explains it.",
    "Rename the first parameter to `value` everywhere in this function and show the result.",
    "Add a docstring to this function and reply with the full function.",
)
SYSTEMS = {
    "ar": None,
    "md-tree-dyn": {"plugin_type": "memory_decoding", "decoding_length": 16, "dynamic_algo": True},
    "hybrid": {"plugin_type": "hybrid"},
}


def tasks(n: int) -> list[list[dict]]:
    out = []
    for i, f in enumerate(FUNCTIONS[:n]):
        src = textwrap.dedent(inspect.getsource(f))
        out.append([{"role": "user", "content": f"{ASKS[i % len(ASKS)]}\n\n```python\n{src}```"}])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=12, help=f"tasks (at most {len(FUNCTIONS)})")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--kernels", default="auto")
    a = ap.parse_args()

    def engines() -> dict[str, LLM]:
        made = {name: LLM(plugin_params=p, kernels=a.kernels) for name, p in SYSTEMS.items() if p}
        for llm in made.values():
            llm.generate(["warm up"], SamplingParams(temperature=0, max_tokens=8))
        return made

    ar = LLM(kernels=a.kernels)
    ar.generate(["warm up"], SamplingParams(temperature=0, max_tokens=8))
    sp = SamplingParams(temperature=0, max_tokens=a.max_tokens)
    tps: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    steps: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    outputs: dict[tuple[str, int], list[int]] = {}
    work = tasks(a.n)
    for rep in range(a.repeats):
        # each repeat's drafters start with an empty memory, which then fills with the
        # repeat's earlier answers as a server's would (so no run sees its own task's answer)
        llms = {"ar": ar, **engines()}
        for i, messages in enumerate(work):
            names = list(SYSTEMS)
            k = (i + rep) % len(names)
            for name in names[k:] + names[:k]:
                out = llms[name].chat(messages, sp)[0]
                tps[(name, i)].append(out.stats["tokens_per_s"])
                steps[(name, i)].append(out.stats["mean_accepted_tokens_per_step"])
                exact_run = outputs.setdefault((name, i), list(out.outputs[0].token_ids))
                if exact_run != list(out.outputs[0].token_ids):
                    outputs[(name, i)] = []  # greedy runs of one system must agree too
        del llms
    print(
        f"{len(work)} tasks, kernels {ar.model.kernels.label}, {a.max_tokens} new tokens at most; "
        f"speedup = median tok/s over AR's, {a.repeats} runs each"
    )
    print("| system | median | geomean | lowest task | tokens/step (median) | greedy = AR |")
    print("|---|---|---|---|---|---|")
    exact = True
    for name in SYSTEMS:
        ratios = [
            statistics.median(tps[(name, i)]) / statistics.median(tps[("ar", i)])
            for i in range(len(work))
        ]
        same = sum(outputs[(name, i)] == outputs[("ar", i)] for i in range(len(work)))
        exact &= same == len(work)
        per_step = statistics.median(statistics.median(steps[(name, i)]) for i in range(len(work)))
        print(
            f"| {name} | {statistics.median(ratios):.2f}x | {statistics.geometric_mean(ratios):.2f}x | "
            f"{min(ratios):.2f}x | {per_step:.2f} | {same}/{len(work)} |"
        )
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
