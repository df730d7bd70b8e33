"""The figures of `paraspec aspd eval`'s report (evaluate.py's module doc says what each one
measures), from the rows of every decoder's answers: per decoder, the paired speed ratios, the
quality of a real prompt set, and the point figures --quick prints."""

from __future__ import annotations

from .eval_stats import mean_ci, ratio_ci, speedup_ci

REAL_SETS = ("real", "sharegpt", "mtbench")  # report keys of the real prompt sets


def _mode_summary(rs: list[dict]) -> dict:
    scored = [r for r in rs if r["ok"] is not None]
    tokens = sum(r["answer_tokens"] for r in rs)
    return {
        "accuracy": mean_ci([float(r["ok"]) for r in scored]),
        "by_family": {
            f: mean_ci([float(r["ok"]) for r in scored if r["family"] == f])
            for f in sorted({r["family"] for r in scored})
        },
        "forward_passes_per_token": ratio_ci(
            [r["forward_passes"] for r in rs], [r["answer_tokens"] for r in rs]
        ),
        "answer_tokens": tokens,
        "total_wall_s": round(sum(r["wall_s"] for r in rs), 2),
        "total_cpu_s": round(sum(r["cpu_s"] for r in rs), 2),
        "prompts_with_blocks": sum(r["blocks"] > 0 for r in rs),
        "text_mismatches": sum(r["text_mismatch"] for r in rs),
    }


def _speeds(rows: dict, idx: list[int]) -> dict:
    """The speed ratios over the prompts `idx` (paired: the same prompts for every decoder)."""

    def col(mode, key):
        return [rows[mode][i][key] for i in idx]

    def speed(base, new, clock="wall_s"):
        return speedup_ci(
            col(base, clock), col(base, "answer_tokens"), col(new, clock), col(new, "answer_tokens")
        )

    return {
        "speedup": speed("control", "aspd"),
        "speedup_cpu": speed("control", "aspd", "cpu_s"),
        "speedup_with_drafts": speed("control+drafts", "aspd+drafts"),
        "speedup_with_drafts_cpu": speed("control+drafts", "aspd+drafts", "cpu_s"),
        "drafts_alone": speed("control", "control+drafts"),
        "latency_ratio": ratio_ci(col("control", "wall_s"), col("aspd", "wall_s")),
        "forward_pass_ratio": ratio_ci(
            col("control", "forward_passes"), col("aspd", "forward_passes")
        ),
    }


def _brief(d: dict) -> dict:
    """Point figures of a summary (the intervals stay in the full report)."""
    return {k: (v.get("ratio", v.get("mean")) if isinstance(v, dict) else v) for k, v in d.items()}


def summarize(rows: dict, threads: int) -> dict:
    from ..model import kernels as cpu_kernels

    n = len(rows["control"])
    per = {mode: _mode_summary(rs) for mode, rs in rows.items()}
    speeds = _speeds(rows, list(range(n)))
    return {
        **_brief(speeds),
        "accuracy_aspd": per["aspd"]["accuracy"]["mean"],
        "accuracy_control": per["control"]["accuracy"]["mean"],
        "accuracy_aspd_drafts": per["aspd+drafts"]["accuracy"]["mean"],
        "accuracy_control_drafts": per["control+drafts"]["accuracy"]["mean"],
        "text_mismatches": sum(m["text_mismatches"] for m in per.values()),
        "n": n,
        "threads": threads,
        "kernels": cpu_kernels.default().name,
        "intervals": speeds,
        "modes": per,
        "answers": rows,
    }


def summarize_real(rows: dict) -> dict:
    """Quality against the reference, speed split by whether ASPD opened a block, and how often it
    opened one where the reference has no list (a block where nothing is parallel)."""
    n = len(rows["aspd"])
    opened = [i for i in range(n) if rows["aspd"][i]["blocks"] > 0]
    serial = [i for i in range(n) if rows["aspd"][i]["blocks"] == 0]
    no_list = [i for i in range(n) if not rows["aspd"][i]["reference_list"]]
    per = {
        mode: {
            **_mode_summary(rs),
            "overlap": mean_ci([r["overlap"] for r in rs]),
            "loops": sum(r["loop"] for r in rs),
        }
        for mode, rs in rows.items()
    }

    def paired(idx):
        return mean_ci([rows["aspd"][i]["overlap"] - rows["control"][i]["overlap"] for i in idx])

    quality = {
        "overlap_aspd": per["aspd"]["overlap"]["mean"],
        "overlap_control": per["control"]["overlap"]["mean"],
        "overlap_diff": paired(range(n)),
        "overlap_diff_list": paired([i for i in range(n) if i not in no_list]),
        "overlap_diff_no_list": paired(no_list),
        "checks_aspd": per["aspd"]["accuracy"]["mean"],
        "checks_control": per["control"]["accuracy"]["mean"],
        "loops_aspd": per["aspd"]["loops"],
        "loops_control": per["control"]["loops"],
    }
    if "base" in per:
        quality["checks_base"] = per["base"]["accuracy"]["mean"]
    return {
        "n": n,
        "prompts_with_blocks": len(opened),
        "reference_no_list": len(no_list),
        "blocks_where_no_list": sum(rows["aspd"][i]["blocks"] > 0 for i in no_list),
        "quality": quality,
        "block_prompts": _speeds(rows, opened) if opened else None,
        "serial_prompts": _speeds(rows, serial) if serial else None,
        "all_prompts": _speeds(rows, list(range(n))),
        "modes": per,
        "answers": rows,
    }


def brief_report(report: dict) -> dict:
    """The report's point figures: what --quick prints as one line."""
    brief = {
        k: v for k, v in report.items() if k not in ("modes", "answers", "intervals") + REAL_SETS
    }
    for name in REAL_SETS:
        real = report.get(name)
        if real:
            brief[name] = {
                "n": real["n"],
                "prompts_with_blocks": real["prompts_with_blocks"],
                "blocks_where_no_list": real["blocks_where_no_list"],
                "reference_no_list": real["reference_no_list"],
                **{
                    k: (v["mean"] if isinstance(v, dict) else v) for k, v in real["quality"].items()
                },
                **{
                    f"{group}_{k}": v
                    for group in ("block_prompts", "serial_prompts")
                    for k, v in _brief(real[group] or {}).items()
                    if k in ("speedup", "speedup_with_drafts")
                },
            }
    return brief
