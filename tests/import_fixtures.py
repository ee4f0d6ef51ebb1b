"""What the import tests share: an isolated data dir, probes of what an import left in the stores,
and tiny random-weight models written in the BGE-M3 / bge-reranker folder layouts."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conftest import CORPUS
from services.object_store import local_images_root
from services.settings import get_settings
from services.vector_store import eq_filter, get_vector_store

CHUNK_PROBE = ["chunk_id", "content", "title", "parent_title", "part", "product", "file_title", "doc_id"]
SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R ids 0..4
TINY_HIDDEN = 32


class Killed(BaseException):
    """Stands in for the process dying mid-import: no `except Exception` handler runs."""


@pytest.fixture
def fresh_data(env, tmp_path):
    """This test's own DATA_DIR (and so its own Milvus file, object folder and task store)."""
    return env(DATA_DIR=str(tmp_path / "data"))


@pytest.fixture(scope="module")
def refusal_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("refusals") / "data"


@pytest.fixture
def refusal_data(env, refusal_dir):
    """One data dir for every refused file (opening a fresh Milvus file costs ~2 s): nothing may
    ever be written there, which `nothing_written` checks after each refusal."""
    return env(DATA_DIR=str(refusal_dir))


def nothing_written(result) -> None:
    """A refused file leaves no chunks, no name rows, no images and no work folder behind."""
    settings = get_settings()
    assert result.status == "failed" and result.chunks == 0
    s = store()
    assert s.count(s.chunks) == 0 and name_rows() == []
    images = local_images_root(settings)
    assert not images.exists() or not any(images.iterdir())


def failed_with(result, node: str, *phrases: str) -> None:
    assert result.status == "failed", result
    assert result.failed_node == node, (result.failed_node, result.error)
    for phrase in phrases:
        assert phrase in result.error, result.error


def assert_refused(path: Path, node: str, *phrases: str) -> None:
    """Importing `path` fails at `node`, saying every phrase, and leaves nothing behind."""
    from graphs.importing.runner import run_import

    result = run_import(path)
    failed_with(result, node, *phrases)
    nothing_written(result)


def store():
    return get_vector_store(get_settings())


def doc_chunks(doc_id: str) -> list[dict]:
    s = store()
    return s.query(s.chunks, eq_filter("doc_id", doc_id), CHUNK_PROBE)


def name_rows(expr: str = "pk >= 0") -> list[dict]:
    s = store()
    return s.query(s.items, expr, ["pk", "product", "file_title", "doc_id"])


def assert_consistent() -> None:
    """No orphans either way and no duplicates: every chunk's product has exactly one name row,
    every name row has chunks, and no document holds the same content twice."""
    s = store()
    chunks = s.query(s.chunks, "chunk_id >= 0", ["product", "doc_id", "content"])
    names = Counter(r["product"] for r in name_rows())
    assert all(n == 1 for n in names.values()), f"duplicate name rows: {names}"
    assert set(names) == {c["product"] for c in chunks}, (set(names), {c["product"] for c in chunks})
    twice = [k for k, n in Counter((c["doc_id"], c["content"]) for c in chunks).items() if n > 1]
    assert not twice, f"{len(twice)} chunks stored twice"


def write_md(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


def _tiny_tokenizer():
    """A WordPiece vocabulary trained in memory on the sample manuals, saved the way a Hugging Face
    checkpoint ships it (tokenizer.json + tokenizer_config.json + special tokens)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import XLMRobertaTokenizerFast

    texts = [p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.md"))]
    tok = Tokenizer(models.WordPiece(unk_token="<unk>"))
    tok.normalizer = normalizers.BertNormalizer(handle_chinese_chars=True, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=3000, special_tokens=SPECIAL_TOKENS,
                                                             show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.decoder = decoders.WordPiece()
    # The XLM-R class (as the real checkpoints declare): FlagReranker builds its pairs with the
    # class's own special-token rule, which a generic fast tokenizer lacks.
    return XLMRobertaTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        cls_token="<s>", sep_token="</s>", mask_token="<mask>", model_max_length=512)


def _tiny_config(vocab_size: int, **extra):
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(
        vocab_size=vocab_size, hidden_size=TINY_HIDDEN, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, **extra)


def write_tiny_models(root: Path) -> tuple[Path, Path]:
    """(bge_m3_dir, reranker_dir): config.json, model.safetensors, tokenizer files, and for BGE-M3
    colbert_linear.pt / sparse_linear.pt state dicts of the right shapes."""
    import torch
    from transformers import XLMRobertaForSequenceClassification, XLMRobertaModel

    torch.manual_seed(0)
    tokenizer = _tiny_tokenizer()
    vocab = len(tokenizer)
    m3, reranker = root / "bge-m3", root / "bge-reranker"
    tokenizer.save_pretrained(m3)
    XLMRobertaModel(_tiny_config(vocab)).save_pretrained(m3)
    torch.save(torch.nn.Linear(TINY_HIDDEN, TINY_HIDDEN).state_dict(), m3 / "colbert_linear.pt")
    sparse = torch.nn.Linear(TINY_HIDDEN, 1)
    # A positive bias keeps relu(token weight) > 0, so every text has a non-empty sparse vector.
    torch.nn.init.normal_(sparse.weight, std=0.05)
    torch.nn.init.constant_(sparse.bias, 0.5)
    torch.save(sparse.state_dict(), m3 / "sparse_linear.pt")
    tokenizer.save_pretrained(reranker)
    # Wide initial weights so that different pairs get visibly different logits.
    XLMRobertaForSequenceClassification(_tiny_config(vocab, num_labels=1, initializer_range=0.5)
                                        ).save_pretrained(reranker)
    return m3, reranker
