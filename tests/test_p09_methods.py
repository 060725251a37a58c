"P09 (neurips25.unlearning.trainer / .methods): the 13 unlearning losses on one trainer, from outside the notebooks."
import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from neurips25 import lm
from neurips25.testing import assert_close_or_below, unit_roundoff
from neurips25.unlearning.methods import (ALL_METHODS, GRIDS, METHODS, AltPO, IdkDPO, NPO, RMU, SimNPO, UNDIAL,
                                          alternates_from_perturbed, benchmark_main, default_alternates, dpo_loss,
                                          get_method, method_grid, resolve_layer, unlearn)

IDK = " i do not know ."


@pytest.fixture(scope="module")
def toy():
    "A tiny Llama that has memorised 40 toy facts; forget = the first 10, retain = the other 30."
    torch.set_num_threads(1)
    P, A = lm.toy_facts(40, seed=3)
    tok = lm.word_tokenizer(P + A + [IDK] + [f" {o} ." for objs in lm.TOY_RELATIONS.values() for o in objs])
    enc = lambda p, c: lm.encode(tok, p, c, max_length=32)
    model = lm.tiny_lm(tok, n_layer=2, d_model=64, n_head=2, n_ctx=32, seed=0, device="cpu")
    lm.train_lm(model, enc(P, A), steps=160, lr=3e-3, batch_size=20, warmup=10, seed=0, desc="toy")
    rel = lambda p: next(r for r in lm.TOY_RELATIONS if p.endswith(r))
    wrong = [[f" {o} ." for o in lm.TOY_RELATIONS[rel(p)] if f" {o} ." != a] for p, a in zip(P[:10], A[:10])]
    return dict(model=model, tok=tok, forget=enc(P[:10], A[:10]), retain=enc(P[10:], A[10:]),
                idk=enc(P[:10], [IDK] * 10), alt=enc(P[:10], alternates_from_perturbed(wrong, seed=0)), enc=enc, P=P, A=A)


def _p(model, batch):
    with torch.no_grad(): return torch.exp(lm.sequence_logprob(model, batch))


def test_registry_has_the_thirteen_with_official_defaults():
    assert sorted(METHODS) == sorted(ALL_METHODS) and len(ALL_METHODS) == 13
    assert get_method("NPO").beta == 0.1 and get_method("IdkDPO").beta == 0.1
    s = get_method("SimNPO"); assert (s.beta, s.delta, s.gamma) == (4.5, 0.0, 0.125)
    u = get_method("UNDIAL"); assert (u.beta, u.alpha) == (10.0, 0.0)
    si = get_method("SatImp"); assert (si.beta1, si.beta2, si.gamma, si.alpha) == (5.0, 1.0, 0.1, 1.0)
    assert get_method("RMU").steering_coeff == 2.0 and get_method("RMU").retain_loss_type == "EMBED_DIFF"
    assert get_method("CE-U").ignore_first_n_answer_tokens == 1 and not get_method("CE-U").uses_retain()
    assert get_method("PDU").dual_warmup_epochs == 5


@pytest.mark.parametrize("name,alts", [("NPO", None), ("IdkDPO", "idk"), ("AltPO", "alt")])
@pytest.mark.parametrize("beta", [0.05, 0.1, 0.5])
def test_preference_losses_at_the_reference(toy, name, alts, beta):
    m = toy["model"]; ref = copy.deepcopy(m)
    with torch.no_grad():
        lf = get_method(name, beta=beta).forget_loss(m, ref, toy["forget"], toy[alts] if alts else None)
    assert float(lf) == pytest.approx(2 / beta * math.log(2), rel=1e-5)       # (2/β) ln 2, 13.863 for β = 0.1


def test_dpo_swap_flips_the_margin(toy):
    m, ref = toy["model"], copy.deepcopy(toy["model"])
    other = copy.deepcopy(m); g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in other.parameters(): p.add_(0.05 * torch.randn(p.shape, generator=g))
        f, w = toy["forget"], toy["alt"]
        margin = (lm.sequence_logprob(other, w) - lm.sequence_logprob(ref, w)) - (lm.sequence_logprob(other, f) - lm.sequence_logprob(ref, f))
        l_wl, l_lw = dpo_loss(other, ref, w, f, 0.1), dpo_loss(other, ref, f, w, 0.1)
        assert float(l_wl) == pytest.approx(float((-20 * F.logsigmoid(0.1 * margin)).mean()), rel=1e-4)
        assert float(l_wl - l_lw) == pytest.approx(float(-2 * margin.mean()), rel=1e-4, abs=1e-3)
        assert float(AltPO().forget_loss(other, ref, f, w)) == pytest.approx(float(l_wl), rel=1e-6)


def test_simnpo_at_its_reference_point(toy):
    m, f = toy["model"], toy["forget"]
    with torch.no_grad():
        lp, mask = lm.token_logprobs(m, f)
        nbar = float(-lp[0].sum() / mask[0].sum())                            # mean NLL of row 0
        row0 = {k: v[:1] for k, v in f.items()}
        assert float(SimNPO(beta=4.5, delta=nbar).forget_loss(m, None, row0)) == pytest.approx(2 / 4.5 * math.log(2), rel=1e-4)


def test_undial_with_zero_penalty_is_self_entropy(toy):
    m, f = toy["model"], toy["forget"]
    with torch.no_grad():
        z = m(input_ids=f["input_ids"], attention_mask=f["attention_mask"]).logits[:, :-1].float()
        real = f["attention_mask"][:, :-1].bool()                            # padding positions do not count
        H = -(z.softmax(-1) * z.log_softmax(-1)).sum(-1)[real].mean()
        assert float(UNDIAL(beta=0.0).forget_loss(m, copy.deepcopy(m), f)) == pytest.approx(float(H), rel=1e-4)
        assert float(UNDIAL(beta=10.0).forget_loss(m, copy.deepcopy(m), f)) > float(H)   # the penalised target disagrees


def test_rmu_moves_the_layer_toward_the_steering_vector(toy):
    m = toy["model"]; ref = copy.deepcopy(m)
    probe = RMU(steering_coeff=20.0, layer=1); probe.setup(m, ref, seed=0)
    with torch.no_grad(): d0 = float(probe.forget_loss(m, ref, toy["forget"])); r0 = float(probe.retain_loss(m, ref, toy["retain"]))
    assert r0 == pytest.approx(0.0, abs=1e-9)
    u, _ = unlearn(copy.deepcopy(m), toy["forget"], toy["retain"], "RMU", steps=10, lr=3e-3, batch_size=5, warmup=0,
                   steering_coeff=20.0, layer=1)
    probe.setup(u, ref, seed=0)                                               # same seed: the same control vector
    with torch.no_grad(): d1 = float(probe.forget_loss(u, ref, toy["forget"]))
    assert d1 < 0.5 * d0


@pytest.mark.parametrize("name", ALL_METHODS)
def test_a_few_steps_lower_the_forget_probability(toy, name):
    m = toy["model"]; p0 = float(_p(m, toy["forget"]).mean())
    kw = {"PDU": {"retain_loss_eps_rel": 1.5}, "RMU": {"steering_coeff": 20.0}}.get(name, {})
    u, h = unlearn(copy.deepcopy(m), toy["forget"], toy["retain"], name, steps=6, lr=3e-3, batch_size=5, warmup=0,
                   alternates=default_alternates(name, toy["idk"], toy["alt"]), **kw)
    assert len(h) == 6 and np.isfinite(h.loss).all()
    assert float(_p(u, toy["forget"]).mean()) < p0
    assert torch.equal(next(m.parameters()), next(toy["model"].parameters()))   # the target itself is untouched


@pytest.mark.parametrize("name", ["RMU", "IdkDPO"])
def test_deterministic_under_a_seed(toy, name):
    def run(seed):
        _, h = unlearn(copy.deepcopy(toy["model"]), toy["forget"], toy["retain"], name, steps=3, lr=1e-3, batch_size=4,
                       seed=seed, warmup=0, alternates=default_alternates(name, toy["idk"], toy["alt"]))
        return h.loss.to_numpy()
    assert np.array_equal(run(0), run(0)) and not np.allclose(run(0), run(1))


def test_bad_inputs_are_rejected(toy):
    m, f, r = copy.deepcopy(toy["model"]), toy["forget"], toy["retain"]
    with pytest.raises(ValueError, match="known methods: .*AltPO.*CE-U"): unlearn(m, f, r, "GradDescent", steps=1)
    for name in ("IdkDPO", "AltPO", "IdkNLL"):
        with pytest.raises(ValueError, match=f"{name} needs `alternates`"): unlearn(m, f, r, name, steps=1)
    with pytest.raises(ValueError, match="matches 0 modules"): unlearn(m, f, r, "RMU", steps=1, layer=r"model\.layers\.7")
    with pytest.raises(ValueError, match="out of range"): resolve_layer(m, 2)
    with pytest.raises(ValueError, match="mismatched lengths"): unlearn(m, {**f, "labels": f["labels"][:3]}, r, steps=1)
    with pytest.raises(ValueError, match="aligned with the forget rows"):
        unlearn(m, f, r, "IdkDPO", steps=1, alternates={k: v[:4] for k, v in toy["idk"].items()})
    with pytest.raises(ValueError, match="lr must be a positive finite"): unlearn(m, f, r, "NPO", steps=1, lr=float("nan"))
    with pytest.raises(ValueError, match="PDU needs retain_loss_eps"): unlearn(m, f, r, "PDU", steps=1)
    with pytest.raises(ValueError, match="valid:"): get_method("SimNPO", betta=1.0)
    with pytest.raises(ValueError, match="no answer token left"):
        unlearn(m, lm.encode(toy["tok"], toy["P"][:2], [" paris", " oslo"], add_eos=False), None, "CE-U", steps=1)
    assert torch.equal(next(m.parameters()), next(toy["model"].parameters()))   # nothing was trained


def test_grids_cover_every_method_and_build_valid_trials():
    assert set(GRIDS) == set(ALL_METHODS)
    assert len(method_grid("NPO")) == 27 and len(method_grid("GradDiff")) == 20 and len(method_grid("UNDIAL")) == 27
    for name in GRIDS:
        for t in method_grid(name, lr_scale=100.0):
            assert t["lr"] >= 1e-3 - 1e-12
            get_method(name, **{k: v for k, v in t.items() if k != "lr"})
    with pytest.raises(ValueError, match="not hyperparameters"): method_grid("NPO", betta=1.0)


def test_benchmark_cli_tiny(capsys):
    df = benchmark_main(["--model", "tiny", "--steps", "2", "--batch-size", "4", "--methods", "GradDiff", "NPO"])
    assert df.method.tolist() == ["fine-tune (baseline)", "GradDiff", "NPO"] and (df.steps_per_s > 0).all()
    assert "steps_per_s" in capsys.readouterr().out


def test_one_trainer_step_equals_a_hand_written_adamw_step(toy):
    f, r = toy["forget"], toy["retain"]
    loop, _ = unlearn(copy.deepcopy(toy["model"]), f, r, "NPO", steps=1, lr=1e-3, batch_size=4, seed=11, warmup=0, beta=0.5)
    hand, ref = copy.deepcopy(toy["model"]), copy.deepcopy(toy["model"])
    hand.train()
    fi = torch.randperm(10, generator=torch.Generator().manual_seed(11))[:4]
    ri = torch.randperm(30, generator=torch.Generator().manual_seed(11 + 1_000_003))[:4]
    fb, rb = {k: v[fi] for k, v in f.items()}, {k: v[ri] for k, v in r.items()}
    with torch.no_grad(): lp_ref = lm.sequence_logprob(ref, fb)
    delta = lm.sequence_logprob(hand, fb) - lp_ref                               # Δ = log p_θ − log p_ref
    loss = (-2 / 0.5 * F.logsigmoid(-0.5 * delta)).mean() + lm.mean_token_loss(hand, rb)
    opt = torch.optim.AdamW([{"params": [p for p in hand.parameters() if p.ndim >= 2], "weight_decay": 0.01},
                             {"params": [p for p in hand.parameters() if p.ndim < 2], "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999))
    loss.backward(); torch.nn.utils.clip_grad_norm_(list(hand.parameters()), 1.0); opt.step()
    # AdamW's first step moves a weight by lr * g / (|g| + eps) (bias-corrected m = g, v = g^2), whose slope
    # lr * eps / (|g| + eps)^2 reaches lr / eps = 1e5 at g = 0: the float32 gradients of the trainer's path and of this
    # one differ by rounding (a near-0 entry is a cancellation of terms up to max|g|; 0.16 u32 max|g| measured with
    # AVX2 kernels), which moves a weight with |g| ~ eps by up to ~1e-5 differently. The propagated difference, with
    # dg = 4 u32 max|g|, is added to atol/rtol; it is negligible (< 1e-8) wherever |g| > 1e-5.
    grads = {n: q.grad.detach().double() for n, q in hand.named_parameters()}
    dg = 4 * unit_roundoff(np.float32) * max(float(g.abs().max()) for g in grads.values())
    loose = n_el = 0
    for (n, p), (_, q) in zip(loop.named_parameters(), hand.named_parameters()):
        adam = 1e-3 * 1e-8 * dg / (grads[n].abs() + 1e-8) ** 2                 # lr * eps * dg / (|g| + eps)^2
        slack = 1e-6 + 1e-5 * q.detach().double().abs() + adam
        assert_close_or_below((p - q).detach().double().abs().numpy(), slack.numpy(), rtol=0, msg=n)
        loose += int((adam > 1e-6).sum()); n_el += q.numel()
    assert loose < 0.01 * n_el, (loose, n_el)                                   # the extra slack is the exception
