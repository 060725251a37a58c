"P09 (neurips25.unlearning data / models / metrics): SynthTOFU splits, target models and the metrics' closed forms."
import itertools
import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

from neurips25 import lm
from neurips25.unlearning.data import (synth_tofu, synth_tokenizer, qa_batch, check_disjoint, check_split,
                                       JAILBREAK_PREFIX, IDK_ANSWERS, SYNTHETIC_LABEL)
from neurips25.unlearning.models import target_models, model_spec
from neurips25.unlearning.metrics import (answer_stats, truth_ratio_from_losses, em_from_matches, es_from_matches,
                                          auc_forget_holdout, ks_pvalue, privleak_from_auc, harmonic_mean, rouge_scores,
                                          min_k_score, prob, exact_memorization, extraction_strength, forget_quality,
                                          mia_auc, evaluate, ALL_METRICS, prob_normalised_from_loss)


@pytest.fixture(scope="module")
def bench():
    return synth_tofu(n_authors=10, n_questions=5, seed=1)


@pytest.fixture(scope="module")
def pair(bench):
    torch.manual_seed(0)
    return target_models(bench, "tiny", forget="forget10", seed=0, epochs=24)


# ---------------------------------------------------------------- data
@pytest.mark.parametrize("n", [4, 10, 37, 200])
def test_split_sizes_partition_and_nest(n):
    b = synth_tofu(n, 2, seed=0)
    A = lambda s: set(b.split(s).author)
    for p in (1, 5, 10):
        k = max(1, round(p * n / 100))
        assert len(A(f"forget{p:02d}")) == k and len(A(f"holdout{p:02d}")) == k
        assert A(f"forget{p:02d}") | A(f"retain{100 - p}") == A("full")
        assert not A(f"forget{p:02d}") & A(f"retain{100 - p}") and not A(f"holdout{p:02d}") & A("full")
    assert A("forget01") <= A("forget05") <= A("forget10")
    assert not A("retain_perturbed") & A("forget10")
    assert len(b.split("full")) == 2 * n


def test_rows_schema_and_label(bench):
    f = bench.split("forget10")
    assert {"question", "paraphrased_question", "answer", "paraphrased_answer", "perturbed_answers", "author"} <= set(f.columns)
    assert all(len(set(p)) == 5 and pa not in p for p, pa in zip(f.perturbed_answers, f.paraphrased_answer))
    assert (f.source == SYNTHETIC_LABEL).all()
    for s in ("real_authors", "world_facts"):
        d = bench.split(s)
        assert all(a not in p for a, p in zip(d.answer, d.perturbed_answers))
    assert len(bench.idk) == len(IDK_ANSWERS) == 20
    assert synth_tofu(10, 5, seed=1).qa.equals(bench.qa)                      # deterministic in the seed


def test_bad_inputs(bench):
    tok = synth_tokenizer(bench)
    f = bench.split("forget10")
    with pytest.raises(ValueError, match="missing column"): qa_batch(tok, f[["question"]])
    with pytest.raises(ValueError, match="empty split"): qa_batch(tok, f.iloc[:0])
    nan = f.copy(); nan.loc[0, "question"] = None
    with pytest.raises(ValueError, match="NaN"): qa_batch(tok, nan)
    with pytest.raises(ValueError, match="answers would be truncated"): qa_batch(tok, f, max_length=6)
    with pytest.raises(ValueError, match="overlap"): check_disjoint(f, bench.split("full"), "forget10", "full")
    with pytest.raises(ValueError, match="unknown split"): bench.split("forget50")
    with pytest.raises(ValueError, match="n_authors"): synth_tofu(2)
    with pytest.raises(ValueError, match="perturbed_answers"):
        check_split(f.assign(perturbed_answers=[["x"]] * (len(f) - 1) + [[]]), ["perturbed_answers"])
    with pytest.raises(ValueError, match="unknown model kind"): model_spec("gpt4")


def test_qa_batch_masks_prompt(bench):
    tok = synth_tokenizer(bench)
    f = bench.split("forget10").iloc[:4]
    b = qa_batch(tok, f)
    for i, (q, a) in enumerate(zip(f.question, f.answer)):
        lab = b["labels"][i]
        assert int((lab != -100).sum()) == len(a.split()) + 1                  # answer words + <eos>
        assert tok.decode(lab[lab != -100][:-1]) == a
    bj = qa_batch(tok, f, answer_prefix=JAILBREAK_PREFIX)
    assert (bj["labels"] != -100).sum() == (b["labels"] != -100).sum()


# ---------------------------------------------------------------- closed forms
def test_truth_ratio_hand_values():
    r, agg = truth_ratio_from_losses([1.0], [[2.0, 2.0]], "closer_to_1_better")
    assert r[0] == pytest.approx(math.exp(-1)) and agg == pytest.approx(0.3679, abs=1e-4)
    assert truth_ratio_from_losses([1.0], [[2.0, 2.0]], "true_better")[1] == pytest.approx(0.6321, abs=1e-4)
    assert truth_ratio_from_losses([1.0], [[2.0, 2.0]], "prob_mean")[1] == pytest.approx(1 / (1 + math.exp(-1)))
    with pytest.raises(ValueError, match="aggregator"): truth_ratio_from_losses([1.0], [[1.0]], "max")


def test_em_es_hand_and_official_loop():
    assert em_from_matches([[0, 1, 0, 1, 1]])[0] == pytest.approx(0.6)
    assert es_from_matches([[0, 1, 0, 1, 1]])[0] == pytest.approx(0.4)            # k = 3, |y| = 5
    assert es_from_matches([[1, 0]], official=False)[0] == 0.0
    rng = np.random.default_rng(5)
    for _ in range(200):
        m = list(rng.random(rng.integers(1, 10)) < 0.6)
        for k in range(len(m)):
            if all(m[k:]): break
        assert es_from_matches([m])[0] == pytest.approx(1 - k / len(m))


def test_auc_ks_privleak_hm():
    assert auc_forget_holdout([1, 2, 3], [4, 5]) == 1.0
    assert privleak_from_auc(1.0, 0.5) == pytest.approx(-100, abs=1e-6)
    rng = np.random.default_rng(2)
    f, h = rng.integers(0, 5, 25).astype(float), rng.integers(1, 6, 18).astype(float)   # many ties
    brute = np.mean([(b > a) + 0.5 * (b == a) for a in f for b in h])
    assert auc_forget_holdout(f, h) == pytest.approx(brute)
    assert auc_forget_holdout(f, h) == pytest.approx(roc_auc_score(np.r_[np.zeros(25), np.ones(18)], np.r_[f, h]))
    x = rng.normal(size=12)
    assert ks_pvalue(x, x) == 1.0
    a, b = np.array([.1, .4, .5, .8, .9, 1.3]), np.array([.2, .25, .3, .35, .6, .7])
    def d(u, v):
        g = np.r_[u, v]; return np.abs((u[:, None] <= g).mean(0) - (v[:, None] <= g).mean(0)).max()
    pool, d0 = np.r_[a, b], d(a, b)
    perm = [d(pool[list(c)], np.delete(pool, list(c))) >= d0 - 1e-12 for c in itertools.combinations(range(12), 6)]
    assert ks_pvalue(a, b) == pytest.approx(np.mean(perm), abs=1e-9)
    assert harmonic_mean([0.95, 0.68]) == pytest.approx(0.79, abs=0.005)
    assert harmonic_mean([0.92, 0.79]) == pytest.approx(0.85, abs=0.005)
    assert harmonic_mean([0.3] * 8 + [0.0]) == 0.0
    assert min_k_score([-1, -2, -3, -4, -5], 0.4) == pytest.approx(4.5)
    assert prob_normalised_from_loss([0.0], [[0.0, 0.0]])[0] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="NaN"): ks_pvalue([np.nan, 1.0], [1.0, 2.0])


def test_rouge_l_recall_is_lcs_over_reference():
    refs, gens = ["alpha beta gamma delta", "one two three"], ["beta delta alpha", "three two one"]
    def lcs(a, b):
        T = np.zeros((len(a) + 1, len(b) + 1), int)
        for i, j in itertools.product(range(len(a)), range(len(b))):
            T[i + 1, j + 1] = T[i, j] + 1 if a[i] == b[j] else max(T[i, j + 1], T[i + 1, j])
        return T[-1, -1]
    sc = rouge_scores(gens, refs)
    assert list(sc.rougeL_recall) == pytest.approx([lcs(r.split(), g.split()) / len(r.split()) for r, g in zip(refs, gens)])


class _Oracle(torch.nn.Module):
    "Puts all mass on the next input token: argmax always equals the label (a test double, not causal)."
    def __init__(self, V):
        super().__init__(); self.V = V; self.w = torch.nn.Parameter(torch.zeros(1))
        self.config = SimpleNamespace(max_position_embeddings=64)
    def forward(self, input_ids, attention_mask=None, **kw):
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], 1)
        return SimpleNamespace(logits=30 * F.one_hot(nxt, self.V).float() + 0 * self.w)


def test_oracle_has_em_es_one(bench):
    tok = synth_tokenizer(bench); f = bench.split("forget10")
    o = _Oracle(len(tok))
    assert exact_memorization(o, tok, f).value == 1.0 and extraction_strength(o, tok, f).value == 1.0
    assert prob(o, tok, f).value == pytest.approx(1.0, abs=1e-6)


# ---------------------------------------------------------------- trained models
def test_full_model_remembers_forget_set_better(bench, pair):
    full, retain, tok = pair
    f = bench.split("forget10")
    assert prob(full, tok, f).value > prob(retain, tok, f).value + 0.2
    assert exact_memorization(full, tok, f).value > exact_memorization(retain, tok, f).value + 0.1
    assert forget_quality(retain, tok, f, retain_model=retain).value == pytest.approx(1.0)
    assert mia_auc(full, tok, f, bench.split("holdout10"), "loss").value > 0.9


def test_answer_stats_match_lm_score(bench, pair):
    full, _, tok = pair
    f = bench.split("retain_perturbed")
    st = answer_stats(full, tok, f, batch_size=7)
    sc = lm.score(full, tok, list(f.question), list(f.answer))
    np.testing.assert_allclose(st.avg_loss, sc.loss.to_numpy(), rtol=1e-4, atol=1e-5)


def test_evaluate_keys_and_errors(bench, pair):
    full, retain, tok = pair
    with pytest.raises(ValueError, match="forget_quality needs"): evaluate(full, tok, bench)
    with pytest.raises(ValueError, match="unknown metric"): evaluate(full, tok, bench, metrics=["bleu"])
    with pytest.raises(ValueError, match="needs the retain model"): forget_quality(full, tok, bench.split("forget10"))
    cheap = [m for m in ALL_METRICS if "rouge" not in m and m not in ("model_utility", "mia_gradnorm")]
    r = evaluate(full, tok, bench, retain_model=retain, metrics=cheap)
    assert set(r) == set(cheap)
    rr = evaluate(retain, tok, bench, retain_model=retain, metrics=cheap)
    assert rr["forget_quality"] == pytest.approx(1.0) and rr["privleak"] == pytest.approx(0.0, abs=1e-6)
    assert r["privleak"] < rr["privleak"] and r["forget_es"] > rr["forget_es"]
