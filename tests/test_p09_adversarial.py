"""P09 adversarial inputs: every case below was a silent wrong value, a silent cast or a deep, cryptic error
(noted per case); each is now one clear ValueError at the entry. Valid inputs give bit-identical results
(checked outside the test suite against a snapshot of ~200 calls)."""
import copy

import numpy as np
import pandas as pd
import pytest
import torch

from neurips25 import lm
from neurips25.unlearning import benchmark as B
from neurips25.unlearning import meta as MT
from neurips25.unlearning import methods as ME
from neurips25.unlearning import metrics as M
from neurips25.unlearning import trainer as T
from neurips25.unlearning.data import format_prompts, qa_batch, synth_tofu, synth_tokenizer


@pytest.fixture(scope="module")
def small(p09_tiny):
    "conftest's p09_tiny (SynthTOFU 10 x 3, tokenizer, untrained one-layer Llama) with the forget/retain batches."
    bench, tok, model = p09_tiny
    fdf, hdf = bench.split("forget10"), bench.split("holdout10")
    return bench, tok, model, fdf, hdf, qa_batch(tok, fdf), qa_batch(tok, bench.split("retain90"))


# ---------------------------------------------------------------- data
def test_data_entry_checks(small):
    bench, tok, model, fdf, *_ = small
    for seed in (True, 1.5, np.random.default_rng(0)):            # True / a Generator were stored as bench.seed
        with pytest.raises(ValueError, match="seed must be an integer >= 0"): synth_tofu(10, 3, seed=seed)
    with pytest.raises(ValueError, match="forget split"): bench.training_set("forgetxx")     # int('xx') error
    with pytest.raises(ValueError, match="not the bare string"): format_prompts(tok, "Who ?")   # one prompt per char
    for ml in (20.5, True, 0):
        with pytest.raises(ValueError, match="max_length must be an integer >= 1"): qa_batch(tok, fdf, max_length=ml)
    assert synth_tofu(10, 3, seed=np.int64(0)).qa.equals(bench.qa)


# ---------------------------------------------------------------- metrics
@pytest.mark.parametrize("bs", [0, -1, 1.5, True, "4"])
def test_batch_sizes(small, bs):
    bench, tok, model, fdf, *_ = small                               # 0: range() error; -1: NoneType; True: ran at 1
    for f in (lambda: M.answer_stats(model, tok, fdf, batch_size=bs),
              lambda: M.option_stats(model, tok, fdf, batch_size=bs),
              lambda: M.rouge(model, tok, fdf, batch_size=bs),         # -1: "0 generations but 3 references"
              lambda: M.evaluate_results(model, tok, bench, metrics=["forget_prob"], batch_size=bs)):
        with pytest.raises(ValueError, match="batch_size must be an integer >= 1"): f()


def test_metric_entry_checks(small):
    bench, tok, model, fdf, hdf, *_ = small
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 1"):
        M.rouge(model, tok, fdf, max_new_tokens=30.5)                   # ROUGE 0 silently
    with pytest.raises(ValueError, match="max_new_tokens must be"):
        M.evaluate_results(model, tok, bench, metrics=["forget_rouge"], max_new_tokens=True)
    with pytest.raises(ValueError, match="not the bare string"): M.option_stats(model, tok, fdf, "answer")
    with pytest.raises(ValueError, match="not the bare string"): M.evaluate_results(model, tok, bench, metrics="forget_prob")
    with pytest.raises(ValueError, match=r"auc_ret must be a number in \[0, 1\]"):   # ignored when privleak was not asked
        M.evaluate_results(model, tok, bench, metrics=["forget_prob"], auc_ret=2.0)
    with pytest.raises(ValueError, match="auc_ret must be a number"):
        M.evaluate_results(model, tok, bench, metrics=["forget_prob"], auc_ret=True)
    with pytest.raises(ValueError, match="invalid p-norm"):             # True ran as the 1-norm
        M.mia_scores(model, tok, fdf.iloc[:1], "gradnorm", p=True)
    with pytest.raises(ValueError, match="stats has 2 examples, df 3"):  # another split's statistics were scored
        M.mia_scores(model, tok, fdf, "loss", stats=M.answer_stats(model, tok, hdf.iloc[:2]))


@pytest.mark.parametrize("f,match", [
    (lambda: M.prob_from_loss([-1.0]), "avg_loss must be >= 0"),                       # p = e > 1
    (lambda: M.truth_ratio_from_losses([-1.0], [[0.5]]), "correct_avg_loss must be >= 0"),
    (lambda: M.truth_ratio_from_losses([1.0], [[-0.5]]), "wrong_avg_losses must be >= 0"),
    (lambda: M.prob_normalised_from_loss([0.5], [[-0.5]]), "wrong_avg_losses must be >= 0"),
    (lambda: M.harmonic_mean([True, True]), "must hold numbers"),                      # 1.0
    (lambda: M.auc_forget_holdout([True, False], [0.5]), "must hold numbers"),
])
def test_metric_values(f, match):
    with pytest.raises(ValueError, match=match): f()


def test_valid_metric_values_unchanged():
    assert M.prob_from_loss([0.0, 0, 1]).tolist() == [1.0, 1.0, float(np.exp(-1))]
    assert M.prob_from_loss(np.array([0, 2])).dtype == np.float64
    assert M.truth_ratio_from_losses(np.zeros(2), np.zeros((2, 3)), "prob_mean")[1] == pytest.approx(0.5)


# ---------------------------------------------------------------- trainer
@pytest.mark.parametrize("kw,match", [
    (dict(lr=True), "lr must be a positive finite number"),                 # ran at lr 1
    (dict(epochs=True, steps=None), "epochs must be a positive number"),    # one epoch
    (dict(epochs="2", steps=None), "epochs must be a positive number"),     # TypeError: must be real number
    (dict(warmup=True), "warmup must be an int >= 0"),                      # one warm-up step
    (dict(seed=1.5), "seed must be an integer"),                             # manual_seed RuntimeError
    (dict(seed=True), "seed must be an integer"),
    (dict(seed=np.random.default_rng(0)), "seed must be an integer"),
    (dict(callback_every=2.5), "callback_every must be an integer >= 0"),   # NaN rows in the history
    (dict(callback_every=-1), "callback_every must be an integer >= 0"),
    (dict(weight_decay=-1.0), "weight_decay must be a finite number >= 0"),  # weights grew, silently
    (dict(weight_decay=float("nan")), "weight_decay must be"),              # NaN weights, no error
    (dict(weight_decay=True), "weight_decay must be"),
    (dict(betas=(0.9,)), "betas must be a pair"),                            # IndexError
    (dict(betas=(0.9, True)), "betas must be a pair"),
])
def test_unlearn_arguments(small, kw, match):
    *_, model, fdf, hdf, f, r = small
    m = copy.deepcopy(model)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(ValueError, match=match):
        T.unlearn(m, f, r, "GradDiff", **{"steps": 1, "lr": 1e-3, **kw})
    assert all(torch.equal(v, before[k]) for k, v in m.state_dict().items())


def test_unlearn_batches_and_numpy_seed(small):
    *_, model, fdf, hdf, f, r = small
    with pytest.raises(ValueError, match="must be an integer tensor"):      # embedding RuntimeError
        T.unlearn(copy.deepcopy(model), {**f, "input_ids": f["input_ids"].float()}, r, steps=1)
    with pytest.raises(ValueError, match="must be an integer tensor"):
        T.check_batch({**f, "labels": f["labels"].tolist()})
    with pytest.raises(ValueError, match="where attention_mask is 0"):      # IndexError in take_rows
        T.unlearn(copy.deepcopy(model), {**f, "attention_mask": torch.zeros_like(f["attention_mask"])}, r, steps=1)
    a = T.unlearn(copy.deepcopy(model), f, None, "NPO", alpha=0.0, steps=2, lr=1e-3, seed=np.int64(3))   # TypeError
    b = T.unlearn(copy.deepcopy(model), f, None, "NPO", alpha=0.0, steps=2, lr=1e-3, seed=3)
    assert a[1].loss.tolist() == b[1].loss.tolist()
    assert all(torch.equal(v, b[0].state_dict()[k]) for k, v in a[0].state_dict().items())


# ---------------------------------------------------------------- methods
def test_methods_entry_checks():
    with pytest.raises(ValueError, match="list of strings"): ME.idk_alternates(["no idea .", 1], 3)   # [1, 1, 1]
    with pytest.raises(ValueError, match="must be strings"): ME.alternates_from_perturbed([[1, 2]])    # [2]
    with pytest.raises(ValueError, match="seed must be an integer >= 0"): ME.idk_alternates(["a ."], 2, seed=True)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"): ME.alternates_from_perturbed([["a ."]], 0.5)
    assert ME.idk_alternates(["a .", "b ."], 5, np.random.default_rng(1)) == ME.idk_alternates(["a .", "b ."], 5, 1)
    for lim in (-1, True, 1.5):                                  # -1 dropped the last trial, True kept one
        with pytest.raises(ValueError, match="limit must be None or an integer >= 0"): ME.method_grid("NPO", limit=lim)
    for s in (True, "2", float("nan"), -1.0):
        with pytest.raises(ValueError, match="lr_scale must be a positive number"): ME.method_grid("NPO", lr_scale=s)
    assert len(ME.method_grid("NPO", limit=0)) == len(ME.method_grid("NPO")) == 27      # 0: every trial, as before


# ---------------------------------------------------------------- meta
def test_meta_entry_checks(small):
    model = small[2]
    with pytest.raises(ValueError, match="must hold numbers"): MT.faithfulness(["1", "2"], [0.5])   # faith 1.0
    with pytest.raises(ValueError, match="must hold numbers"): MT.best_threshold([True, False], [0.5])
    with pytest.raises(ValueError, match="must have one shape"):           # broadcast to [1, 1, 1]
        MT.relearn_score(0.1, 0.5, [0.1, 0.2, 0.3], [0.5])
    with pytest.raises(ValueError, match="must have one shape"):
        MT.relearn_score([0.1, 0.2], 0.5, [0.1, 0.2, 0.3], [0.5, 0.1, 0.2])
    with pytest.raises(ValueError, match="the same shape"): MT.quant_score([0.1, 0.2, 0.3], [0.5])
    with pytest.raises(ValueError, match="must hold numbers"): MT.relearn_score("0.1", 0.5, [0.1], [0.5])
    with pytest.raises(ValueError, match="must hold numbers"): MT.quant_score([0.1], ["0.5"])
    for tol in (float("nan"), -1, True, "0"):                              # NaN tol: R = 1 for every model
        with pytest.raises(ValueError, match="tol must be"): MT.relearn_score(0.1, 0.5, [0.1], [0.5], tol=tol)
        with pytest.raises(ValueError, match="tol must be"): MT.quant_score([0.1], [0.5], tol=tol)
    for w in (np.ones(4), [1.0, 2.0], torch.arange(4)):                     # TypeError; integers came back unchanged
        with pytest.raises(ValueError, match="floating-point torch tensor"): MT.quantize_roundtrip(w)
    with pytest.raises(ValueError, match="not the bare string"):          # lm_head was quantized silently
        MT.quantize_model(model, skip="lm_head")
    assert MT.relearn_score(0.1, 0.5, [], []).shape == (0,) and MT.quant_score([], []).shape == (0,)


def _probe():
    rows = [{"model": f"m{i}", "lr": 1e-3, "stage": s, "model_utility": 0.6, "prob": 0.1 * i + d}
            for i in range(3) for s, d in (("before", 0), ("relearn", 0.2), ("quant", 0.05))]
    rows += [{"model": "retain", "lr": np.nan, "stage": s, "model_utility": 0.8, "prob": v}
             for s, v in (("before", 0.05), ("relearn", 0.3))]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("kw,match", [
    (dict(mu_target=np.nan), "mu_target must be a finite number"),         # NaN: no model kept, silently
    (dict(mu_target="0.7"), "mu_target must be a finite number"),
    (dict(thresholds={"prob": np.nan}), "thresholds must be finite"),      # NaN: no model kept, silently
    (dict(thresholds={"prob": "0.3"}), "thresholds must be finite"),
    (dict(max_mu_drop="0.2"), "max_mu_drop must be a number"),             # TypeError
    (dict(max_mu_drop=True), "max_mu_drop must be a number"),
])
def test_robustness_table_arguments(kw, match):
    args = {"thresholds": {"prob": 0.35}, "mu_target": 0.7, **kw}
    with pytest.raises(ValueError, match=match): MT.robustness_table(_probe(), **args)
    assert MT.robustness_table(_probe(), {"prob": 0.35}, 0.7).n_kept.tolist() == [3]


# ---------------------------------------------------------------- benchmark
def test_benchmark_entry_checks():
    for v in ("0.5", True, None):                                           # "0.5" parsed, True counted as 1
        with pytest.raises(ValueError, match="must be a finite number"):
            B.utility_score({"model_utility": v}, {"model_utility": 1.0})
    with pytest.raises(ValueError, match="AUCs must be numbers"): B.mia_similarity(["0.5"], 0.5)
    with pytest.raises(ValueError, match="one per auc_unl value"): B.mia_similarity([0.5, 0.2, 0.1], [0.5, 0.1])
    with pytest.raises(ValueError, match="auc_unl is empty"): B.mia_similarity([], 0.5)
    best = pd.DataFrame({"method": ["a", "b"], "agg": [0.3, 0.5], "mem_util": [0.2, 0.1]})
    with pytest.raises(ValueError, match="aggregates is empty"): B.rankings(best, [])                  # IndexError
    with pytest.raises(ValueError, match="not the bare string"): B.rankings(best, "agg")               # KeyError
    with pytest.raises(ValueError, match="hold NaN"): B.rankings(best.assign(agg=[0.3, np.nan]))        # IntCastingNaNError
    with pytest.raises(ValueError, match="lacks column"): B.rankings(best, ["nope"])
    assert B.rankings(best).rank_agg.tolist() == [1, 2]
    for s in (-1, float("nan"), True, "100"):                               # lr -1e-5 / nan came out
        with pytest.raises(ValueError, match="lr_scale must be a positive number"): B.scaled_grid("NPO", lr_scale=s)
    for seed in (True, 1.5, np.random.default_rng(0)):                       # TypeError deep in numpy
        with pytest.raises(ValueError, match="seed must be an integer"): B.scaled_grid("NPO", seed=seed)
    assert B.scaled_grid("NPO", 3, 100.0, np.int64(2)) == B.scaled_grid("NPO", 3, 100.0, 2)
