"""P09 `full` end to end on CPU at tiny sizes (issue 30 item 4): a TOFU format fixture (the HF snapshot's parquet
configs, TOFU's column names) and a MUSE-News fixture read through the data layer, and a tiny local Hugging Face model
folder (built here with transformers' LlamaConfig, a word-level tokenizer with a chat template) registered as the
`llama32_1b_instruct` source: the target step, one headline seed, the MUSE experiment, the method benchmark and the
meta-evaluation in process, and 14a_tab_smollm2_targets and 15_tab_smollm2_headline through papermill at profile full."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from neurips25 import lm
from neurips25.sources import registry as R
from neurips25.sources.registry import SourceError
from neurips25.unlearning.data import synth_tofu, IDK_ANSWERS, JAILBREAK_PREFIX, load_tofu, load_muse, format_prompts
from neurips25.unlearning.models import HF_CHAT_SYSTEM, load_hf

REPO = Path(__file__).resolve().parents[1]
SPECIALS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>", "Question:", "Answer:"]
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
            "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def _parquet(path: Path, df: pd.DataFrame):
    import pyarrow as pa
    import pyarrow.parquet as pq
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False), path)


def _tofu_frame(df: pd.DataFrame, perturbed: bool) -> pd.DataFrame:
    "SynthTOFU rows in TOFU's column names (perturbed_answer: a list of 5)."
    cols = {"question": df.question, "answer": df.answer}
    if perturbed:
        cols.update(paraphrased_answer=df.paraphrased_answer, paraphrased_question=df.paraphrased_question,
                    perturbed_answer=[list(x) for x in df.perturbed_answers])
    return pd.DataFrame(cols)


def write_tofu(root: Path, bench) -> None:
    "TOFU's snapshot layout: <config>/train-00000-of-00001.parquet for every config the pipelines read."
    f = lambda cfg: root / cfg / "train-00000-of-00001.parquet"
    _parquet(f("full"), _tofu_frame(bench.split("full"), False))
    for p in (1, 5, 10):
        _parquet(f(f"forget{p:02d}"), _tofu_frame(bench.split(f"forget{p:02d}"), False))
        _parquet(f(f"forget{p:02d}_perturbed"), _tofu_frame(bench.split(f"forget{p:02d}"), True))
        _parquet(f(f"retain{100 - p}"), _tofu_frame(bench.split(f"retain{100 - p}"), False))
        _parquet(f(f"holdout{p:02d}"), _tofu_frame(bench.split(f"holdout{p:02d}"), False))
    _parquet(f("retain_perturbed"), _tofu_frame(bench.split("retain_perturbed"), True))
    for name in ("real_authors", "world_facts"):
        d = bench.split(name)
        _parquet(f(f"{name}_perturbed"), pd.DataFrame({"question": d.question, "answer": d.answer,
                                                       "perturbed_answer": [list(x) for x in d.perturbed_answers]}))


def write_muse(root: Path, bench) -> None:
    "MUSE's layout: <config>/<split>-00000-of-00001.parquet (raw, knowmem, verbmem, privleak), SynthTOFU words only."
    qa = bench.split("full")
    f = lambda cfg, split: root / cfg / f"{split}-00000-of-00001.parquet"
    _parquet(f("raw", "forget"), pd.DataFrame({"text": [" ".join(qa.answer[i:i + 4]) for i in range(0, 16, 4)]}))
    _parquet(f("raw", "retain1"), pd.DataFrame({"text": [" ".join(qa.answer[i:i + 4]) for i in range(16, 32, 4)]}))
    for split, rows in (("forget_qa", qa.iloc[:4]), ("forget_qa_icl", qa.iloc[4:6]), ("retain_qa", qa.iloc[16:20]),
                        ("retain_qa_icl", qa.iloc[20:22])):
        _parquet(f("knowmem", split), pd.DataFrame({"question": rows.question, "answer": rows.answer}))
    _parquet(f("verbmem", "forget"), pd.DataFrame({"prompt": list(qa.question[:4]), "gt": list(qa.answer[:4])}))
    _parquet(f("privleak", "forget"), pd.DataFrame({"text": list(qa.answer[:6])}))
    _parquet(f("privleak", "holdout"), pd.DataFrame({"text": list(bench.split("holdout10").answer[:6])}))


def write_hf_model(folder: Path, bench) -> None:
    "A tiny Llama folder (safetensors) with a word-level tokenizer over the fixtures' words and a chat template."
    from transformers import LlamaConfig, LlamaForCausalLM
    words = bench.texts() + list(IDK_ANSWERS) + [JAILBREAK_PREFIX, HF_CHAT_SYSTEM, " ".join(SPECIALS)]
    tok = lm.word_tokenizer(words)
    tok.chat_template = TEMPLATE
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=160, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    "The three fixtures, registered as the data layer's tofu, muse_news and llama32_1b_instruct sources."
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("p09_full")
    bench = synth_tofu(20, 2, seed=0)
    roots = {n: tmp / n for n in ("tofu", "muse_news", "llama32_1b_instruct")}
    write_tofu(roots["tofu"], bench)
    write_muse(roots["muse_news"], bench)
    roots["llama32_1b_instruct"].mkdir()
    write_hf_model(roots["llama32_1b_instruct"], bench)
    env = {R.SOURCES[n].env_var: str(r) for n, r in roots.items()}
    mp = pytest.MonkeyPatch()
    mp.delenv("NEURIPS25_DATA", raising=False)
    mp.setenv("NEURIPS25_CACHE", "0")                              # nothing of these runs lands in data/cache
    for k, v in env.items(): mp.setenv(k, v)
    yield bench, roots, env
    mp.undo()


def test_tofu_through_the_data_layer(sources):
    bench, roots, _ = sources
    t = load_tofu()
    f = t.split("forget10")
    assert list(f.question) == list(bench.split("forget10").question)
    assert {"paraphrased_answer", "perturbed_answers", "paraphrased_question"} <= set(f.columns)
    assert all(len(x) == 5 for x in f.perturbed_answers)
    assert len(t.split("holdout10")) == len(bench.split("holdout10"))
    assert list(t.training_set(None).question) == list(bench.split("full").question)       # TOFU: full only
    assert len(t.training_set("forget05")) == len(bench.split("retain95"))
    ra = t.split("real_authors")
    assert (ra.paraphrased_answer == ra.answer).all() and len(ra.perturbed_answers.iloc[0]) == 5
    with pytest.raises(ValueError, match="unknown TOFU split"):
        t.split("forget20")


def test_tofu_questions_must_match_their_perturbed_config(sources, tmp_path, monkeypatch):
    bench, roots, _ = sources
    root = tmp_path / "tofu_bad"
    write_tofu(root, bench)
    bad = _tofu_frame(bench.split("forget10"), True).iloc[::-1]
    _parquet(root / "forget10_perturbed" / "train-00000-of-00001.parquet", bad)
    monkeypatch.setenv(R.SOURCES["tofu"].env_var, str(root))
    with pytest.raises(ValueError, match="do not hold the same questions"):
        load_tofu().split("forget10")


def test_missing_data_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(R.SOURCES["tofu"].env_var, str(tmp_path / "nothing"))
    with pytest.raises(SourceError, match="tofu"):
        load_tofu()


def test_the_registry_lists_every_tofu_config_the_loader_reads(sources, tmp_path, monkeypatch):
    # a snapshot that lacks one config fails at `require` (neurips25 data verify tofu), naming it, instead of at the
    # split a GPU run reaches hours in
    from neurips25.unlearning.data import TOFU_SPLITS
    bench, roots, _ = sources
    listed = {f.path.split("/")[0] for f in R.SOURCES["tofu"].files}
    read = set(TOFU_SPLITS.values()) | {k for k in TOFU_SPLITS if k.startswith("forget")}   # + the plain forget configs
    assert listed == read, (sorted(listed - read), sorted(read - listed))
    R.verify("tofu", roots["tofu"])                                         # the fixture has them all
    for lost in ("world_facts_perturbed", "forget01", "retain99"):
        root = tmp_path / lost
        write_tofu(root, bench)
        for f in (root / lost).iterdir():
            f.unlink()
        (root / lost).rmdir()
        monkeypatch.setenv(R.SOURCES["tofu"].env_var, str(root))
        with pytest.raises(SourceError, match=lost):
            load_tofu()


def test_hf_folder_uses_its_own_chat_template(sources):
    model, tok = load_hf("llama32_1b_instruct", device="cpu")
    p = format_prompts(tok, ["Where was X born ?"])[0]
    assert p.startswith("<|system|> " + HF_CHAT_SYSTEM) and p.endswith("<|assistant|> ")
    assert getattr(model, "_neurips25_autocast", None) is None                       # bf16 autocast only on CUDA


def test_target_step_and_headline_in_process(sources):
    from neurips25.unlearning.paper import target_step, headline_seed
    kw = dict(data="tofu", model_path="llama32_1b_instruct", target_epochs=2.0, device="cpu", cache=False)
    ts = target_step("hf", seed=0, **kw)
    rows = ts["rows"].set_index("model")
    assert list(rows.index) == ["Finetuned", "Retain", "Base (untuned)"]
    assert rows.loc["Retain", "forget_quality"] == pytest.approx(1.0) and abs(rows.loc["Retain", "privleak"]) < 1e-6
    assert ts["finetune"].steps.tolist() == [max(1, -(-2 * 40 // 32)), max(1, -(-2 * 36 // 32))]  # 8 x 4 per step, 2 epochs
    hs = headline_seed("hf", seed=0, methods=["GradAscent", "NPO"], unlearn_lr=1e-3, unlearn_epochs=1.0, batch_size=2,
                       grad_accum=2, **kw)
    assert list(hs["rows"].model) == ["Finetuned", "Retain", "GradAscent", "NPO"]
    assert np.isfinite(hs["rows"].model_utility.to_numpy(float)).all()


def test_grad_checkpointing_and_autocast_paths(sources):
    from neurips25.unlearning.models import finetune
    t = load_tofu()
    m, tok, h = finetune("hf", t, t.split("forget10"), epochs=1.0, grad_ckpt=True, batch_size=2, grad_accum=1,
                         device="cpu", cache_name="p09_test_ckpt")
    on = m.is_activation_checkpointing if hasattr(type(m), "is_activation_checkpointing") else m.is_gradient_checkpointing
    assert len(h) == 2 and not on
    lm.set_autocast(m, torch.bfloat16)                                               # the CUDA path's autocast, on the CPU
    from neurips25.unlearning.metrics import evaluate_results
    r = evaluate_results(m, tok, t, metrics=["forget_prob", "forget_es", "mia_min_k"])
    assert 0 <= r["forget_prob"].value <= 1


def test_muse_in_process(sources):
    from neurips25.unlearning.paper import muse_experiment
    out = muse_experiment("muse_news", model_path="llama32_1b_instruct", methods=["GradAscent"], epochs=1.0,
                          target_epochs=1.0, max_length=48, batch_size=2, grad_accum=1, device="cpu")
    assert list(out.model) == ["Finetuned", "Retain", "GradAscent"]
    assert out.set_index("model").loc["Finetuned", "paper_privleak"] == pytest.approx(-99.81)
    assert out.auc_ret_source.iloc[0] == "retain model" and out.loc[1, "privleak"] == 0.0
    for c in ("forget_knowmem_ROUGE", "forget_verbmem_ROUGE", "retain_knowmem_ROUGE"):
        assert out[c].between(0, 1).all(), c


def test_benchmark_and_meta_experiments_on_tofu(sources):
    from neurips25.unlearning.benchmark import benchmark_experiment
    from neurips25.unlearning.meta import meta_experiment
    b = benchmark_experiment("hf", data="tofu", model_path="llama32_1b_instruct", target_epochs=1.0,
                             methods=["GradAscent"], n_trials=1, lr_scale=100.0, unlearn_epochs=1.0, grad_accum=2,
                             device="cpu", cache=False)
    assert list(b["trials"].method) == ["GradAscent"] and not b["trials"].failed.any()   # the tiny model's MU can be 0:
    assert {"forget_es", "mia_min_k", "model_utility"} <= set(b["target"])                # scoring is tested elsewhere
    m = meta_experiment("hf", data="tofu", model_path="llama32_1b_instruct", target_epochs=1.0, pool_lrs=(1e-3,),
                        pool_epochs=(1,), methods=("GradDiff",), unlearn_lrs=(1e-3,), unlearn_epochs=1.0, device="cpu",
                        cache=False)
    assert len(m["pools"]) == 4 and {"forget_es", "mia_min_k"} <= set(m["pools"].columns)   # 2 x 2 variants, 1 lr, 1 checkpoint
    assert len(m["probe"]) >= 1


def _papermill(nb: str, params: dict, env_extra: dict, tmp_path: Path) -> tuple[Path, dict]:
    "Run a P09 notebook at the full profile with `params` injected; its output folder and claims."
    out = tmp_path / f"run_{nb}"
    env = {**os.environ, **env_extra, "NEURIPS25_OUTPUT_DIR": str(out), "NEURIPS25_PROFILE": "full",
           "NEURIPS25_CACHE": "0", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NEURIPS25_DEVICE": "cpu",
           "NEURIPS25_PROGRESS": "0"}
    env.pop("NEURIPS25_DATA", None)
    path = REPO / "nbs" / "p09_unlearning" / nb
    args = [sys.executable, "-m", "papermill", str(path), str(tmp_path / f"out_{nb}"), "-k", "python3",
            "--cwd", str(path.parent)]
    for k, v in params.items():
        args += ["-r", k, v] if isinstance(v, str) else ["-p", k, json.dumps(v)]
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    return out, {c["id"]: c for c in json.loads((out / "claims.json").read_text())}


def test_full_profile_plans_with_the_fixtures(sources, monkeypatch, tmp_path):
    from neurips25.runner.executors import plan
    bench, roots, env = sources
    for k, v in env.items(): monkeypatch.setenv(k, v)
    jobs = plan(["p09/tab_smollm2_targets"], profile="full", device="cpu", force=True, outputs=tmp_path / "o")
    job = next(iter(jobs))
    assert job.needs == [] and job.effective["model"] == "hf" and job.effective["data"] == "tofu"


def test_headline_and_targets_notebooks_full_through_papermill(sources, tmp_path):
    bench, roots, env = sources
    common = dict(model="hf", data="tofu", model_path="llama32_1b_instruct", n_seeds=1, target_epochs=1.0, device="cpu")
    out, claims = _papermill("14a_tab_smollm2_targets.ipynb", {**common, "forget": "forget10"}, env, tmp_path)
    assert claims["fq_finetuned_low_seeds"]["verdict"] == "not comparable"              # one seed: precondition unmet
    assert "Base (untuned)" in pd.read_csv(out / "targets_all_metrics.csv").model.tolist()
    out, claims = _papermill("15_tab_smollm2_headline.ipynb", {**common, "forget_splits": "forget05,forget10",
                             "methods": "GradAscent,NPO", "unlearn_lr": 1e-3, "unlearn_epochs": 1.0, "batch_size": 2,
                             "grad_accum": 2, "muse": "news", "muse_epochs": 1.0, "n_boot": 50}, env, tmp_path)
    head = pd.read_csv(out / "headline.csv")
    assert set(head.forget) == {"forget05", "forget10"}
    f10 = head[head.forget == "forget10"].set_index("model")
    assert f10.loc["Finetuned", "paper_fq"] == pytest.approx(1.66e-21, rel=1e-6)      # repro.md, same model and split
    assert f10.paper_model.iloc[0] == "Llama-3.2-1B-Instruct"
    assert head[head.forget == "forget05"].set_index("model").loc["NPO", "paper_fq"] == pytest.approx(0.14)
    muse = pd.read_csv(out / "muse.csv")
    assert list(muse.model) == ["Finetuned", "Retain", "GradAscent", "NPO"]
    assert claims["privleak_full"]["verdict"] == "not comparable"
    assert claims["privleak_muse_news"]["verdict"] in ("reproduced", "partly", "not reproduced")   # MUSE ran
    assert claims["privleak_muse_books"]["verdict"] == "not comparable"                 # not asked for here
