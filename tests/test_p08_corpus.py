"P08 (neurips25.curation.corpus, .embeddings): the mini-Pile build and the document embedders, from outside the notebooks."
import json
import re

import numpy as np
import pytest

import neurips25.core as core
from neurips25.curation import corpus as C
from neurips25.curation import embeddings as E


def _need(*sources):
    "Skip (naming the Debian packages) when a source's files are not installed on this machine."
    for s in sources:
        try: C.get_source(s).units()
        except C.SourceNotInstalledError as e: pytest.skip(f"corpus source {s!r} not installed ({e}); run `make data`")


@pytest.fixture(scope="module")
def small_pile():
    _need(*C.SOURCES)
    return C.build_minipile(docs_per_source=8, doc_tokens=48, seed=0, cache=False, show_progress=False)


def test_build_is_reproducible_and_exact(small_pile):
    mp = small_pile
    again = C.build_minipile(docs_per_source=8, doc_tokens=48, seed=0, cache=False, show_progress=False)
    assert again.sha256 == mp.sha256 and len(mp.sha256) == 64
    assert again.manifest.sha256.tolist() == mp.manifest.sha256.tolist()
    assert mp.sources == list(C.SOURCES)
    assert mp.docs.groupby("source").size().to_dict() == {s: 8 for s in C.SOURCES}
    # every document has exactly doc_tokens whitespace tokens, checked with an independent count
    assert {len(t.split()) for t in mp.docs.text} == {48}
    assert not mp.docs.text.map(C.normalise).duplicated().any()
    assert set(mp.docs.split) <= set(C.SPLITS) and mp.docs.doc_id.is_unique
    man = mp.manifest.set_index("source")
    assert (man.documents == 8).all() and (man.train + man.val + man.test == man.documents).all()
    assert (man.bytes > 0).all() and (man.files_read >= 1).all() and (man.files_read <= man.files).all()
    # labels index `sources`
    lab = mp.labels()
    assert [mp.sources[k] for k in lab] == mp.docs.source.tolist()


def test_seed_and_source_independence(small_pile):
    other = C.build_minipile(["fortunes", "jargon"], docs_per_source=8, doc_tokens=48, seed=0, cache=False, show_progress=False)
    # a source's documents do not depend on which other sources are in the build
    assert other.manifest.set_index("source").sha256.to_dict() == \
        small_pile.manifest.set_index("source").loc[["fortunes", "jargon"]].sha256.to_dict()
    seed1 = C.build_minipile(["fortunes"], docs_per_source=8, doc_tokens=48, seed=1, cache=False, show_progress=False)
    assert seed1.sha256 != C.build_minipile(["fortunes"], docs_per_source=8, doc_tokens=48, seed=0, cache=False,
                                            show_progress=False).sha256


def test_cache_roundtrip_writes_manifest(tmp_path, monkeypatch):
    _need("fortunes")
    monkeypatch.setattr(core, "CACHE_PATH", tmp_path)
    a = C.build_minipile(["fortunes"], docs_per_source=10, doc_tokens=32, cache=True, show_progress=False)
    b = C.build_minipile(["fortunes"], docs_per_source=10, doc_tokens=32, cache=True, show_progress=False)
    assert a.sha256 == b.sha256 and len(list((tmp_path / "p08_minipile").glob("*.pkl"))) == 1
    rec = json.loads((tmp_path / "p08_minipile" / f"manifest-{a.sha256[:16]}.json").read_text())
    assert rec["sha256"] == a.sha256 and rec["sources"][0]["packages"] == "fortunes-min fortunes"


def test_dedup_removes_planted_duplicates():
    rng = np.random.default_rng(1)
    base = [" ".join(rng.choice([f"t{i}" for i in range(300)], 30)) for _ in range(40)]
    planted = base + [base[0], base[7], "  " + base[9].upper().replace(" ", "\n") + " ."]     # 2 exact, 1 normalised
    docs, stats = C.build_corpus({"s": planted}, doc_tokens=10, docs_per_source=None, seed=0)
    st = stats.iloc[0]
    assert (st.dup_exact, st.dup_normalised) == (2, 1)
    # the kept documents are exactly the chunks of the 40 distinct records: 40 * 30 / 10
    assert len(docs) == 120 and (docs.text.map(C.count_tokens) == 10).all()
    kept, counts = C.dedup(planted)
    assert kept == list(range(40)) and counts == {"exact": 2, "normalised": 1, "empty": 0}


def test_chunking_exact_and_errors():
    text = "  alpha beta\tgamma\n\ndelta epsilon zeta eta  "
    assert C.chunk_text(text, 3) == ["alpha beta\tgamma", "delta epsilon zeta"]
    assert C.chunk_text("abcdefgh", 3, tokenizer="chars") == ["abc", "def"]
    with pytest.raises(ValueError, match="shorter than one document of 50 tokens"): C.chunk_text(text, 50)
    with pytest.raises(ValueError, match="unknown tokenizer"): C.chunk_text(text, 2, tokenizer="bpe")
    with pytest.raises(ValueError, match="integer >= 1"): C.chunk_text(text, 0)
    rand = "".join(np.random.default_rng(0).choice(list("abcdéfgh "), 400))
    docs, _ = C.build_corpus({"s": [rand]}, doc_tokens=7, tokenizer="chars", docs_per_source=20)
    assert (docs.text.str.len() == 7).all() and len(docs) == 20


def test_corpus_errors_name_the_fix(monkeypatch):
    with pytest.raises(ValueError, match=r"known sources are \['bible'"): C.build_minipile(["shakespeare"])
    with pytest.raises(ValueError, match="empty after deduplication"): C.build_corpus({"s": ["", " ... "]}, doc_tokens=2)
    with pytest.raises(ValueError, match="yields only"): C.build_corpus({"s": ["a b c d e f"]}, doc_tokens=2, docs_per_source=9)
    with pytest.raises(ValueError, match="summing to 1"): C.build_corpus({"s": ["a b"]}, 1, split_fractions=(0.9, 0.2, 0))
    monkeypatch.setattr(C, "WORDNET_DIR", C.Path("/nonexistent"))
    with pytest.raises(C.SourceNotInstalledError, match="apt-get install wordnet-base"): C.build_minipile(["wordnet"], cache=False)


# ---------------------------------------------------------------- embeddings

def _near_dup(t, every=8):
    w = t.split(" ")
    return " ".join("zebra" if i % every == every - 1 else x for i, x in enumerate(w))


@pytest.fixture(scope="module")
def tiny_lm_and_docs(small_pile):
    import neurips25.lm as lm
    docs = small_pile.texts()[::2]                                      # 32 documents across the 8 sources
    tok = lm.train_bpe_tokenizer(small_pile.texts(), vocab_size=350)
    model = lm.tiny_lm(tok, n_layer=1, d_model=24, n_head=2, n_ctx=256, device="cpu", seed=0)
    return docs, model, tok


@pytest.mark.parametrize("name,kw,dim", [("tfidf", {"dim": 16}, 16), ("hashed_ngrams", {"dim": 256}, 256),
                                         ("byte_random", {"dim": 24}, 24), ("lm_token", "lm", 24),
                                         ("lm_output", "lm", 24), ("minilm", {}, 384)])
def test_embedder_shape_dtype_determinism_structure(tiny_lm_and_docs, name, kw, dim):
    docs, model, tok = tiny_lm_and_docs
    if name == "minilm": docs = docs[::2]                               # keep the test fast
    if kw == "lm": kw = dict(model=model, tokenizer=tok)
    texts = docs + [_near_dup(t) for t in docs]; n = len(docs)
    if name == "tfidf": kw = {**kw, "fit_texts": texts}
    X = E.embed_docs(name, texts, **kw)
    assert X.shape == (2 * n, dim) and X.dtype == np.float32 and np.isfinite(X).all()
    np.testing.assert_array_equal(E.embed_docs(name, texts[:5], **kw), E.embed_docs(name, texts[:5], **kw))
    np.testing.assert_allclose(E.embed_docs(name, texts[:5], **kw), X[:5], atol=1e-5)   # batch-independent
    Z = X / np.linalg.norm(X, axis=1, keepdims=True); S = Z @ Z.T
    other = (np.arange(n) + np.random.default_rng(0).integers(1, n, n)) % n
    # a document is nearer its own near-duplicate than a random other document
    assert (S[np.arange(n), np.arange(n) + n] > S[np.arange(n), other]).mean() >= 0.95


def test_tfidf_matches_sklearn_directly():
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(["alpha", "beta", "gamma", "def", "return", "lambda", "x", "self"], 12)) for _ in range(30)]
    ref = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, dtype=np.float32).fit_transform(texts)
    np.testing.assert_allclose(E.embed_docs("tfidf", texts, dim=None), ref.toarray(), atol=1e-6)
    svd = TruncatedSVD(8, algorithm="randomized", n_iter=5, random_state=3).fit_transform(ref)
    np.testing.assert_allclose(E.embed_docs("tfidf", texts, dim=8, seed=3), svd, atol=1e-5)
    # fitting on other texts: the transform of the same vectoriser/SVD, row by row
    fit = texts[:20]
    v = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, dtype=np.float32).fit(fit)
    s = TruncatedSVD(4, algorithm="randomized", n_iter=5, random_state=0).fit(v.transform(fit))
    np.testing.assert_allclose(E.embed_docs("tfidf", texts[20:], dim=4, fit_texts=fit), s.transform(v.transform(texts[20:])), atol=1e-5)


def test_lm_embeddings_definitions(tiny_lm_and_docs):
    import torch
    docs, model, tok = tiny_lm_and_docs
    text = "the quick brown fox"
    ids = tok([text], add_special_tokens=False)["input_ids"][0]
    W = model.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_allclose(E.embed_docs("lm_token", [text], model=model, tokenizer=tok)[0], W[ids].mean(0), atol=1e-6)
    with torch.no_grad():
        h = model(input_ids=torch.tensor([[tok.bos_token_id] + ids]), output_hidden_states=True).hidden_states[-1][0, 1:]
    np.testing.assert_allclose(E.embed_docs("lm_output", [text, docs[0]], model=model, tokenizer=tok)[0],
                               h.mean(0).numpy(), atol=1e-5)
    # a Llama's layer 0 (rotary positions) is the bare token embedding: lm_hidden(layer=0) == lm_token
    np.testing.assert_allclose(E.embed_docs("lm_hidden", docs[:4], model=model, tokenizer=tok, layer=0),
                               E.embed_docs("lm_token", docs[:4], model=model, tokenizer=tok), atol=1e-6)


def test_embedding_errors(tiny_lm_and_docs):
    import torch
    docs, model, tok = tiny_lm_and_docs
    with pytest.raises(ValueError, match=re.escape("known embedders are ['byte_random'")): E.embed_docs("bert", docs)
    with pytest.raises(ValueError, match="empty batch"): E.embed_docs("tfidf", [])
    with pytest.raises(ValueError, match="blank text"): E.embed_docs("hashed_ngrams", ["a b", ""])
    with pytest.raises(ValueError, match="takes no argument"): E.embed_docs("byte_random", docs, dims=3)
    with pytest.raises(ValueError, match="needs model= and tokenizer="): E.embed_docs("lm_token", docs)
    with pytest.raises(ValueError, match="longer than the context"):
        E.embed_docs("lm_output", [" ".join(docs)], model=model, tokenizer=tok, truncation=False)
    nan = type(model)(model.config).eval()
    nan.load_state_dict(model.state_dict())
    with torch.no_grad(): nan.get_input_embeddings().weight.fill_(float("nan"))
    with pytest.raises(ValueError, match="produced NaN or inf"): E.embed_docs("lm_output", docs[:2], model=nan, tokenizer=tok)


def test_source_check_refuses_other_files_and_records_them(monkeypatch):
    "A source whose files hash differently from the committed reference's: strict stops before building, warn records."
    _need("fortunes", "jargon")
    ref = {**C.REFERENCE_SOURCES, "jargon": {"sha256": "0" * 64, "versions": "jargon-text 0.0-test"}}
    monkeypatch.setattr(C, "REFERENCE_SOURCES", ref)
    built = []
    monkeypatch.setattr(C, "_build", lambda *a, **k: built.append(1))
    with pytest.raises(C.SourceMismatchError, match=r"jargon: .* from jargon-text .*the reference 000000000000… from "
                                                    r"jargon-text 0\.0-test"):
        C.build_minipile(["fortunes", "jargon"], docs_per_source=8, doc_tokens=48, cache=False, show_progress=False,
                         source_check="strict")
    assert not built                                   # nothing was read or built
    monkeypatch.undo()
    monkeypatch.setattr(C, "REFERENCE_SOURCES", ref)
    with pytest.warns(UserWarning, match="not comparable"):
        mp = C.build_minipile(["fortunes", "jargon"], docs_per_source=8, doc_tokens=48, cache=False,
                              show_progress=False, source_check="warn")
    man = mp.manifest.set_index("source")
    assert man.loc["jargon", "reference"] == "differs" and man.loc["jargon", "reference_versions"] == "jargon-text 0.0-test"
    assert man.loc["fortunes", "content_sha256"] == C.source_content_sha256("fortunes")
    with pytest.raises(ValueError, match="source_check must be one of"):
        C.build_minipile(["jargon"], cache=False, source_check="off")


def test_sources_read_only_their_own_packages(tmp_path, monkeypatch):
    "man, fortunes and licences list only the files dpkg says their packages installed (not a folder's other files)."
    _need("man", "fortunes", "licences")
    owners = {}
    for src in ("man", "fortunes"):
        units = C.get_source(src).units()
        out = __import__("subprocess").run(["dpkg-query", "-S", *map(str, units)], capture_output=True, text=True).stdout
        owners[src] = {line.split(":")[0] for line in out.splitlines()}
        assert len(out.splitlines()) == len(units)
    assert owners["man"] <= set(C.MAN_PACKAGES) and owners["fortunes"] <= set(C.FORTUNE_PACKAGES)
    lic = C.get_source("licences").units()
    want = {(C.LICENCE_DIRS[1] / pkg / "copyright").resolve() for pkg in C.LICENCE_PACKAGES}   # doc folders may link
    assert {p.resolve() for p in lic if p.name == "copyright"} == want
    # a package that is not installed is named, with the command that installs it
    monkeypatch.setattr(C, "MAN_PACKAGES", ("manpages", "no-such-package-xyz"))
    with pytest.raises(C.SourceNotInstalledError, match="no-such-package-xyz"):
        C.get_source("man").units()
