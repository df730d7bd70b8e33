"""Decode speed with the attention kernel (csrc/attention.cpp, each ISA build this CPU runs) and
with the torch path, one run.

    python benchmarks/decode_attention.py [--repeats 3] [--new-tokens 160]

Same engine and model; only the model's decode attention (Transformer.kernels, whose linears
stay as built) is switched between runs, which alternate so drift hits all alike. For each of AR and memory_decoding (tree, dynamic_algo)
on a chat prompt and a code prompt: decode tokens/s (medians), and whether the greedy outputs of
the two paths are the same text (they need not be bit-identical: each path is exact only against
itself). Also the measured forward cost curve t(k)/t(1) under each path.
"""
from __future__ import annotations

import argparse
import statistics

PROMPTS = {
    "chat": [{"role": "user", "content": "Explain how a hash table works, with a short Python example."}],
    "code": [{"role": "user", "content": "Write a Python function that parses an ISO 8601 date string and "
                                         "returns a datetime, with tests."}],
}
SYSTEMS = {"ar": None, "md-tree-dyn": {"plugin_type": "memory_decoding", "dynamic_algo": True}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=160)
    args = ap.parse_args()

    from paraspec import LLM
    from paraspec.bench.base import BenchTask, RunParams
    from paraspec.bench.paraspec_systems import ParaspecSystem
    from paraspec.info import cpu_report
    from paraspec.model import kernels

    per_isa = {k.name: k for k in reversed(kernels.runnable())}     # each ISA once, torch included
    if len(per_isa) == 1:
        raise SystemExit("no attention kernel runs here: python src/paraspec/model/csrc/build.py")
    llm = LLM(dtype="bfloat16", quantization="none")
    report = cpu_report(llm.kernels)
    print(f"CPU {report['cpu']}; features {' '.join(report['features'])}")
    # bench systems: every run of a task starts from the same (empty) memory, whichever path ran before
    systems = {name: ParaspecSystem(name, llm, plugin) for name, plugin in SYSTEMS.items()}
    tasks = {name: BenchTask("attention", name, llm.tokenizer.encode_chat(m), args.new_tokens)
             for name, m in PROMPTS.items()}
    for sy in systems.values():
        sy.begin_set("attention")
        sy.begin_task()
    paths = dict(reversed(per_isa.items()))        # best first
    built = llm.model.kernels
    curves = {}
    for name, k in paths.items():
        llm.model.kernels = k
        llm.runner._cost = None                     # measure the curve under this path
        c = llm.runner.forward_cost()
        curves[name] = {n: round(c[n], 2) for n in (4, 8, 12, 16, 32)}
    tps: dict[tuple, list[float]] = {}
    texts: dict[tuple, list[int]] = {}
    for rep in range(args.repeats):
        for pname, task in tasks.items():
            for sname, sy in systems.items():
                for name, k in paths.items():
                    llm.model.kernels = k
                    m = sy.run(task, RunParams(repeat=rep))
                    tps.setdefault((pname, sname, name), []).append(m.decode_tokens_per_s)
                    texts[(pname, sname, name)] = m.token_ids
    llm.model.kernels = built
    print(f"{args.repeats} repeats (median), {args.new_tokens} new tokens, greedy, bf16 weights")
    names = list(paths)
    print("| prompt | system | " + " | ".join(f"{n} tok/s" for n in names) + " | " +
          " | ".join(f"{n} / torch" for n in names[:-1]) + " | same tokens |")
    print("|---|---|" + "---|" * (2 * len(names)))
    for pname in PROMPTS:
        for sname in SYSTEMS:
            med = {n: statistics.median(tps[(pname, sname, n)]) for n in names}
            same = all(texts[(pname, sname, n)] == texts[(pname, sname, "torch")] for n in names)
            print(f"| {pname} | {sname} | " + " | ".join(f"{med[n]:.1f}" for n in names) + " | " +
                  " | ".join(f"{med[n] / med['torch']:.2f}x" for n in names[:-1]) + f" | {same} |")
    for name, c in curves.items():
        print(f"forward cost t(k)/t(1), {name}: {c}")


if __name__ == "__main__":
    main()
