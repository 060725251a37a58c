"""P09 issue 30 items 1, 2, 7 from outside the notebooks: every bad input the review named is one clear error, RMU's
official value, ZLib on the decoded labels, a failed unlearning run leaves the weights as they were, and the unlearning
package imports one way (no cycle)."""
import ast
import copy
import subprocess
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import torch

from neurips25 import lm
from neurips25.unlearning.data import synth_tofu, synth_tokenizer, qa_batch
from neurips25.unlearning.methods import RMU, WGA, SatImp, UNDIAL, PDU, GradDiff, activation_loss, layer_activations
from neurips25.unlearning.metrics import (answer_stats, evaluate_results, min_k_score, mia_scores, privleak_from_auc,
                                          prob_from_loss, zlib_texts, forget_quality)
from neurips25.unlearning.trainer import UnlearnLoss, batch_nll, unlearn

PKG = Path(__file__).resolve().parents[1] / "neurips25" / "unlearning"


@pytest.fixture(scope="module")
def small(p09_tiny):
    "SynthTOFU with 3 forget rows (10 authors x 3 questions) and an untrained tiny Llama over its words (conftest)."
    return p09_tiny


# ---------------------------------------------------------------- the review's cases, each a clear error
def test_privleak_auc_ret_one_is_refused():
    with pytest.raises(ValueError, match="undefined for auc_ret = 1"):
        privleak_from_auc(0.5, auc_ret=1.0)                      # was 5e11
    assert privleak_from_auc(1.0, 0.5) == pytest.approx(-100.0)


@pytest.mark.parametrize("k", [-1, 5, 0, 1.5, "0.4", True])
def test_min_k_fraction(k):
    with pytest.raises(ValueError, match=r"must be in \(0, 1\]"):
        min_k_score([-1.0, -2.0, -3.0], k)                       # k=-1 returned 3.0, k=5 returned 2.0
    assert min_k_score([-1.0, -2.0, -3.0, -4.0, -5.0], 0.4) == pytest.approx(4.5)


@pytest.mark.parametrize("make,match", [(lambda: WGA(beta=-5), "beta must be >= 0"),
                                        (lambda: GradDiff(alpha=-1), "alpha must be >= 0"),
                                        (lambda: GradDiff(gamma=-1.0), "gamma must be >= 0"),
                                        (lambda: SatImp(beta1=-1.0), "beta1 must be >= 0"),
                                        (lambda: UNDIAL(beta=-2.0), "beta must be >= 0"),
                                        (lambda: PDU(dual_step_size=-1.0), "dual_step_size must be >= 0"),
                                        (lambda: RMU(steering_coeff=-2.0), "steering_coeff must be > 0"),
                                        (lambda: GradDiff(alpha="1"), r"alpha must be >= 0 \(a finite number")])
def test_hyperparameters_checked_in_one_place(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_retain_tr_of_the_wrong_length_is_refused_before_any_forward_pass(small, monkeypatch):
    bench, tok, model = small
    assert len(bench.split("forget10")) == 3
    called = []
    monkeypatch.setattr(lm, "score_options", lambda *a, **k: called.append(1))
    with pytest.raises(ValueError, match="retain_tr has 2 values, the forget split 3 examples"):
        evaluate_results(model, tok, bench, metrics=["forget_quality"], retain_tr=[0.4, 0.6])   # returned 0.2
    with pytest.raises(ValueError, match="retain_tr has 2 values"):
        forget_quality(model, tok, bench.split("forget10"), retain_tr=[0.4, 0.6])
    assert called == []


def test_token_ids_outside_the_vocabulary(small):
    bench, tok, model = small
    b = qa_batch(tok, bench.split("forget10"))
    bad = {**b, "input_ids": b["input_ids"].clone()}
    bad["input_ids"][0, 1] = len(tok) + 7
    with pytest.raises(ValueError, match=f"token id {len(tok) + 7}, outside the model's vocabulary"):
        unlearn(copy.deepcopy(model), bad, None, "GradAscent", steps=1)     # was a bare IndexError
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        lm.token_logprobs(model, bad)
    small_vocab = lm.tiny_lm(lm.word_tokenizer(["a b"]), n_layer=1, d_model=16, n_head=2, n_ctx=64, device="cpu")
    with pytest.raises(ValueError, match="another tokenizer"):
        answer_stats(small_vocab, tok, bench.split("forget10"))


@pytest.mark.parametrize("bad", [["1.0"], [1.0, None], [object()]])
def test_prob_from_loss_wants_numbers(bad):
    with pytest.raises(ValueError, match="must hold numbers"):
        prob_from_loss(bad)


@dataclass
class _NaNAtThree(UnlearnLoss):
    name: ClassVar[str] = "NaNAtThree"
    def setup(self, model, ref_model, **kw): self.calls = 0
    def forget_loss(self, model, ref_model, forget, alternates=None):
        self.calls += 1
        nll, mask = batch_nll(model, forget)
        loss = -nll.sum() / mask.sum()
        return loss * float("nan") if self.calls >= 3 else loss


def test_a_run_that_raises_leaves_the_weights_as_they_were(small):
    bench, tok, model = small
    f = qa_batch(tok, bench.split("forget10"))
    m = copy.deepcopy(model)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with pytest.raises(FloatingPointError, match="the loss is nan at step 3"):
        unlearn(m, f, None, _NaNAtThree(), steps=5, lr=1e-2, warmup=0)
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]) and torch.isfinite(v).all(), k
    kept = copy.deepcopy(model)                                          # opting out keeps the two finished steps
    with pytest.raises(FloatingPointError):
        unlearn(kept, f, None, _NaNAtThree(), steps=5, lr=1e-2, warmup=0, restore_on_error=False)
    assert any(not torch.equal(v, before[k]) for k, v in kept.state_dict().items())


def test_a_reference_model_given_by_the_caller_is_left_as_given(small):
    bench, tok, model = small
    f, r = qa_batch(tok, bench.split("forget10")), qa_batch(tok, bench.split("retain90"))
    ref = copy.deepcopy(model).train()
    unlearn(copy.deepcopy(model), f, r, "NPO", steps=1, lr=1e-3, ref_model=ref)
    assert ref.training and all(p.requires_grad for p in ref.parameters())


# ---------------------------------------------------------------- item 1: RMU and ZLib follow the official code
def _official_compute_activation_loss(activation1, activation2, mask):    # open-unlearning rmu.py, verbatim
    squared_diff = torch.nn.functional.mse_loss(activation1, activation2, reduction="none")
    expanded_mask = mask.unsqueeze(-1).expand_as(squared_diff)
    squared_diff_sum = ((squared_diff * expanded_mask).mean(dim=2).sum(dim=(1)))
    num_tokens = mask.sum(dim=-1, keepdim=True)
    return (squared_diff_sum / num_tokens).mean()


def test_rmu_official_broadcast_on_a_padded_batch(small):
    bench, tok, model = small
    f = qa_batch(tok, bench.split("forget10"))
    mask = f["labels"] != -100
    mask[0, mask[0].nonzero()[-3:].flatten()] = False                     # rows of different answer lengths
    mask[2, mask[2].nonzero()[:1].flatten()] = False
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(*mask.shape, 32, generator=g), torch.randn(*mask.shape, 32, generator=g)
    assert len(set(mask.sum(1).tolist())) > 1
    assert float(activation_loss(a, b, mask, official_broadcast=True)) == pytest.approx(
        float(_official_compute_activation_loss(a, b, mask)), abs=1e-6)
    r = RMU(layer=0, official_broadcast=True)
    r.setup(model, copy.deepcopy(model), seed=0)
    with torch.no_grad():
        h = layer_activations(model, f, r.module_name)
        want = _official_compute_activation_loss(h, r.control_vec.expand_as(h), f["labels"] != -100)
        assert float(r.forget_loss(model, None, f)) == pytest.approx(float(want), abs=1e-6)


def test_zlib_compresses_the_decoded_labels(small):
    bench, tok, model = small
    df = bench.split("forget10").copy()
    df["answer"] = ["  " + a.replace(" ", "   ") for a in df.answer]        # extra spaces: the raw string differs
    st = answer_stats(model, tok, df)
    decoded = zlib_texts(tok, st)
    assert decoded == [" ".join(a.split()) for a in df.answer]            # the labels, decoded (specials skipped)
    got = mia_scores(model, tok, df, "zlib", stats=st)
    want = st.avg_loss / np.array([len(zlib.compress(t.encode())) for t in decoded])
    assert np.allclose(got, want) and not np.allclose(got, st.avg_loss / np.array([len(zlib.compress(a.encode()))
                                                                                      for a in df.answer]))


# ---------------------------------------------------------------- item 7: one-way imports
def _imports(path: Path) -> set:
    "The neurips25.unlearning modules a source file imports (static and by importlib string)."
    tree, out = ast.parse(path.read_text()), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module if node.level == 0 else "neurips25.unlearning." + node.module
            out.add(mod)
        elif isinstance(node, ast.Import): out |= {a.name for a in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("neurips25.unlearning."):
            out.add(node.value)
    return {m.rsplit(".", 1)[-1] for m in out if m.startswith("neurips25.unlearning.")}


def test_the_unlearning_modules_import_one_way():
    mods = {p.stem: _imports(p) for p in PKG.glob("*.py") if p.stem != "__init__"}
    assert "methods" not in mods["trainer"] and "trainer" in mods["methods"]
    graph = {m: {d for d in deps if d in mods and d != m} for m, deps in mods.items()}
    state = {}
    def visit(m, stack):                                                   # depth-first search for a back edge
        state[m] = 1
        for d in graph[m]:
            assert state.get(d) != 1, f"import cycle: {' -> '.join(stack + [m, d])}"
            if d not in state: visit(d, stack + [m])
        state[m] = 2
    for m in graph:
        if m not in state: visit(m, [])


def test_a_method_name_resolves_from_the_trainer_module_alone():
    code = ("from neurips25.unlearning.trainer import get_method; "
            "print(type(get_method('RMU')).__name__, type(get_method('CE-U')).__name__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["RMU", "CEU"]
