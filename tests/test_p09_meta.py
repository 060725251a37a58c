"""P09 OpenUnlearning, meta-evaluation and benchmark: assertions on the public API (neurips25.unlearning.meta and
neurips25.unlearning.benchmark), independent of the notebooks.

* the harmonic mean and the paper's Table 2/3 identities,
* the 4-bit quantization simulation against brute force (nearest level, error bound, per-block absmax),
* faithfulness AUC against a brute-force pair count and on perfectly separated pools,
* relearning / quantization scores, the robustness filters on a scripted probe table,
* the benchmark's selection (best HM(Mem, Util) on a scripted grid), privacy, utility, bad inputs,
* runs.yaml's small profile equals the figure notebooks' defaults.
"""
import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from neurips25.unlearning.meta import (harmonic_mean, faithfulness, best_threshold, relearn_score, quant_score,
                                       quantize_roundtrip, quantize_model, NF4_LEVELS, INT4_LEVELS, robustness_table,
                                       meta_table, PAPER_TABLE2)
from neurips25.unlearning.benchmark import (METRIC_NAMES, memorization_score, privacy_score, mia_similarity,
                                            utility_score, score_trials, select_best, rankings, expand_grid,
                                            run_trials, PAPER_TABLE3, paper_rankings)

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "nbs" / "p09_unlearning"
N = METRIC_NAMES


# ---------------------------------------------------------------- harmonic mean and the paper's identities
def test_harmonic_mean_identities():
    assert round(harmonic_mean([0.95, 0.68]), 2) == 0.79
    assert round(harmonic_mean([0.92, 0.79]), 2) == 0.85
    assert harmonic_mean([0.4, 0.0]) == 0.0
    x = np.array([0.2, 0.5, 0.9])
    assert harmonic_mean(x) == pytest.approx(3 / (1 / x).sum())
    assert harmonic_mean(x) <= np.exp(np.log(x).mean()) <= x.mean()      # HM <= GM <= AM
    with pytest.raises(ValueError, match="empty"): harmonic_mean([])
    with pytest.raises(ValueError, match="non-negative"): harmonic_mean([-1, 1])


def test_paper_tables_are_consistent():
    for r in PAPER_TABLE2.itertuples():
        assert abs(harmonic_mean([r.quant_Q, r.relearn_R]) - r.robust) <= 0.011
        assert abs(harmonic_mean([r.faith, r.robust]) - r.overall) <= 0.011
    pr = paper_rankings().set_index("method")
    assert pr.rank_agg.idxmin() == "SimNPO" and pr.rank_mem_util.idxmin() == "GradDiff"


# ---------------------------------------------------------------- quantization
@pytest.mark.parametrize("block", [1, 4, 7, 64])
@pytest.mark.parametrize("code", ["nf4", "int4"])
def test_quantization_matches_brute_force(block, code):
    levels = NF4_LEVELS if code == "nf4" else INT4_LEVELS
    w = torch.randn(3, 11, generator=torch.Generator().manual_seed(block))
    q = quantize_roundtrip(w, block, code).reshape(-1)
    flat = w.reshape(-1)
    half_gap = float((levels[1:] - levels[:-1]).max()) / 2
    for s in range(0, len(flat), block):                  # an independent, loop-based implementation
        b = flat[s:s + block]; a = b.abs().max()
        brute = torch.stack([levels[int(torch.argmin((v / a - levels).abs()))] * a for v in b])
        torch.testing.assert_close(q[s:s + block], brute, atol=1e-6, rtol=0)
        assert float((b - q[s:s + block]).abs().max()) <= half_gap * float(a) + 1e-6
        assert float(q[s:s + block].abs().max()) == pytest.approx(float(a), rel=1e-6)   # the absmax survives


def test_quantize_model_leaves_input_and_embeddings():
    lin = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8))
    before = [p.detach().clone() for p in lin.parameters()]
    q = quantize_model(lin, block_size=8)
    for p, b in zip(lin.parameters(), before): assert torch.equal(p, b)          # original untouched
    assert torch.equal(q[0].weight, lin[0].weight)                              # embedding not quantized
    assert len(torch.unique(q[1].weight)) <= 16 * 8                             # 16 codes x 8 blocks
    with pytest.raises(ValueError, match="no linear layer"): quantize_model(torch.nn.Embedding(3, 3))
    with pytest.raises(ValueError, match="strictly increasing"): quantize_roundtrip(torch.ones(4), 4, torch.tensor([0.5, -0.5]))


# ---------------------------------------------------------------- faithfulness
def test_faithfulness_auc():
    f = faithfulness([0.9, 0.8, 0.95], [0.1, 0.4, 0.3])
    assert f["faith"] == 1.0 and f["accuracy"] == 1.0 and 0.4 < f["threshold"] <= 0.8
    rng = np.random.default_rng(3)
    p, n = rng.integers(0, 5, 20).astype(float), rng.integers(0, 4, 25).astype(float)   # many ties
    brute = np.mean([(a > b) + 0.5 * (a == b) for a, b in itertools.product(p, n)])
    assert faithfulness(p, n)["faith"] == pytest.approx(brute)
    tau, acc = best_threshold(p, n)
    grid = np.r_[np.unique(np.r_[p, n]), np.inf]
    assert acc == pytest.approx(max(((p >= t).mean() + (n < t).mean()) / 2 for t in grid))
    with pytest.raises(ValueError, match="N pool is empty"): faithfulness([0.1], [])
    with pytest.raises(ValueError, match="NaN"): faithfulness([0.1, np.inf], [0.2])


# ---------------------------------------------------------------- robustness
def test_relearn_and_quant_scores():
    np.testing.assert_allclose(relearn_score(0.2, 0.5, 0.1, 0.7), 0.5)        # 0.3 / 0.6
    np.testing.assert_allclose(relearn_score(0.2, 0.5, 0.1, 0.1), 1.0)        # nothing relearnt
    np.testing.assert_allclose(relearn_score(0.5, 0.2, 0.1, 0.7), 0.0)        # clipped
    np.testing.assert_allclose(quant_score([0.3, 0.6], [0.6, 0.3]), [0.5, 1.0])


def test_robustness_filters_on_a_scripted_probe():
    rows = [dict(model="retain", stage="before", es=0.1, model_utility=0.6),
            dict(model="retain", stage="relearn", es=0.4, model_utility=0.6)]
    # unl0: kept, relearns 0.6 (R = 0.5), quantization 0.1 -> 0.2 (Q = 0.5); unl1: utility collapsed (dropped);
    # unl2: not unlearned by the threshold (dropped); unl3: kept, larger lr (not in Q), relearns 0.2 (R = 1)
    spec = [(0.1, 0.7, 0.2, 0.6, 1e-4), (0.0, 0.9, 0.9, 0.1, 1e-4), (0.8, 0.9, 0.8, 0.6, 1e-4), (0.05, 0.25, 0.5, 0.55, 1e-3)]
    for k, (b, r, q, mu, lr) in enumerate(spec):
        for stage, v in (("before", b), ("relearn", r), ("quant", q)):
            rows.append(dict(model=f"unl{k}", stage=stage, es=v, model_utility=mu, lr=lr))
    probe = pd.DataFrame(rows)
    t = robustness_table(probe, {"es": 0.5}, mu_target=0.6).iloc[0]
    assert (t.n_kept, t.n_quant) == (2, 1)
    assert t.relearn_R == pytest.approx(0.75) and t.quant_Q == pytest.approx(0.5)
    assert t.robust == pytest.approx(harmonic_mean([0.75, 0.5]))
    mt = meta_table(pd.DataFrame([{"metric": "es", "faith": 0.9, "threshold": 0.5}]), pd.DataFrame([t]))
    assert mt.overall[0] == pytest.approx(harmonic_mean([0.9, t.robust]))
    with pytest.raises(ValueError, match="max_mu_drop"): robustness_table(probe, {"es": 0.5}, 0.6, max_mu_drop=1.5)


# ---------------------------------------------------------------- benchmark
def _metrics(forgot, mu, mia):
    return {N["es"]: 1 - forgot, N["em"]: 1 - forgot, N["para_prob"]: 1 - forgot, N["tr"]: 1 - forgot,
            N["mu"]: mu, **{k: mia for k in N["mia"].values()}}


def test_scores_hand_cases():
    tgt, ret = _metrics(0.0, 0.8, 0.02), _metrics(0.6, 0.8, 0.5)
    assert memorization_score(tgt) == 0.0 and memorization_score(ret) == pytest.approx(0.6)
    assert privacy_score(ret, ret) == 1.0
    assert privacy_score(tgt, ret) == pytest.approx(1 - 0.48 / 0.5)
    assert mia_similarity(0.9, 0.5) == pytest.approx(0.2) and mia_similarity(0.1, 0.5) == pytest.approx(0.2)
    assert utility_score({N["mu"]: 0.4}, tgt) == pytest.approx(0.5)
    with pytest.raises(KeyError, match="missing"): memorization_score({})
    with pytest.raises(ValueError, match="outside"): memorization_score(_metrics(-0.5, 0.8, 0.5))


def test_selection_picks_best_mem_util_on_scripted_grid():
    tgt, ret = _metrics(0.0, 0.8, 0.02), _metrics(0.6, 0.8, 0.5)
    grid = {"A": [(0.95, 0.08, 0.5), (0.5, 0.8, 0.02), (0.2, 0.8, 0.5)],   # best Mem+Util: the middle (leaks privacy)
            "B": [(0.3, 0.8, 0.5), (0.45, 0.7, 0.45)]}
    res = iter([_metrics(*v) for m in grid for v in grid[m]])
    trials = run_trials({"A": {"i": [0, 1, 2]}, "B": {"i": [0, 1]}}, lambda m, p: next(res))
    sc = score_trials(trials, tgt, ret)
    best = select_best(sc).set_index("method")
    for m in grid:                                                        # brute force over the grid
        g = sc[sc.method == m]
        hm = [harmonic_mean([a, b]) for a, b in zip(g.mem, g.util)]
        assert best.loc[m, "i"] == g.i.iloc[int(np.argmax(hm))]
    assert best.loc["A", "i"] == 1 and best.loc["B", "i"] == 1
    rk = rankings(best.reset_index()).set_index("method")
    assert rk.rank_mem_util["A"] == 1 and rk.rank_agg["B"] == 1          # the ranking depends on the aggregate
    with pytest.raises(ValueError, match="non-empty list"): expand_grid({"lr": []})


# ---------------------------------------------------------------- runs.yaml
def test_runs_yaml_small_equals_notebook_defaults(notebook_defaults):
    import yaml
    spec = yaml.safe_load((SERIES / "runs.yaml").read_text())
    assert spec["series"] == "p09_unlearning" and spec["module"] == "unlearning"
    for name, a in spec["artefacts"].items():
        assert set(a["small"]) == set(a["medium"]) == set(a["full"]), name
        defaults = notebook_defaults(SERIES / a["notebook"])
        for k, v in a["small"].items():
            if k == "seed" and a["notebook"] == "14b_tab_smollm2_target_seed.ipynb":    # one notebook, a seed each:
                assert name == f"tab_smollm2_target_seed{v}" == f"tab_smollm2_target_seed{a['medium'][k]}", name
                continue                                                             # the seed names the artefact
            assert defaults[k] == v, f"{name}: {k} small={v!r} but the notebook says {defaults[k]!r}"
    seeds = [n for n, a in spec["artefacts"].items() if a["notebook"] == "14b_tab_smollm2_target_seed.ipynb"]
    assert seeds == [f"tab_smollm2_target_seed{k}" for k in range(spec["artefacts"]["tab_smollm2_targets"]["medium"]
                                                                   ["n_seeds"])], seeds     # medium's seeds, each one
    assert spec["artefacts"]["tab_smollm2_targets"]["after"] == seeds
    assert spec["artefacts"]["tab_smollm2_headline"]["after"] == ["tab_smollm2_target_seed0"]
    for n in seeds:                          # the same step as tab_smollm2_targets': its parameters, one seed
        a, t = spec["artefacts"][n], spec["artefacts"]["tab_smollm2_targets"]
        for p in ("small", "medium", "full"):
            one = {k: v for k, v in a[p].items() if k != "seed"}
            assert one == {k: v for k, v in t[p].items() if k != "n_seeds"}, (n, p)


SMOLLM2 = ("p09_unlearning/tab_smollm2_target_seed0", "p09_unlearning/tab_smollm2_targets",
           "p09_unlearning/tab_smollm2_headline")


@pytest.mark.parametrize("flags", ["0", "1"])
def test_medium_smollm2_needs_native_cpu_bf16(flags, tmp_path):
    "On a CPU that emulates bf16 (25x slower than float32), the bf16 medium runs are refused before anything starts."
    import os
    import subprocess
    import sys
    from neurips25.core import REPO_ROOT
    env = {**os.environ, "NEURIPS25_CPU_BF16": flags, "NEURIPS25_PROGRESS": "0"}
    cmd = [sys.executable, "-m", "neurips25.runner.cli", "--outputs", str(tmp_path / "out"), "reproduce", *SMOLLM2,
           "--profile", "medium", "--force"]
    dry = subprocess.run(cmd + ["--dry-run"], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300)
    assert dry.returncode == 0, dry.stderr
    marked = [ln for ln in dry.stdout.splitlines() if "[needs native CPU bf16" in ln]
    assert len(marked) == (len(SMOLLM2) if flags == "0" else 0), dry.stdout
    if flags == "1":
        return
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300)
    assert r.returncode != 0 and f"{len(SMOLLM2)} run(s) cannot start here, so nothing was run" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "--set autocast=" in r.stdout + r.stderr and not (tmp_path / "out" / "p09_unlearning").exists()
    # float32 in a slot of its own is allowed (planned only here: it would fine-tune SmolLM2)
    ok = subprocess.run(cmd + ["--set", "autocast=", "--dry-run"], capture_output=True, text=True, env=env,
                        cwd=REPO_ROOT, timeout=300)
    assert ok.returncode == 0 and "needs native CPU bf16" not in ok.stdout and "medium.set-" in ok.stdout, ok.stdout
