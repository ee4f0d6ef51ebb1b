"""One typed settings object, read from the environment and `.env`.

Every field has a working default so that a fresh checkout runs with no server and no key.
Nothing here opens a connection.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from dotenv import load_dotenv

ROOT = Path(__file__).resolve().parent.parent


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def _int(name: str, default: int) -> int:
    raw = _env(name)
    return int(raw) if raw else default


def _float(name: str, default: float) -> float:
    raw = _env(name)
    return float(raw) if raw else default


def _list(name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in _env(name).split(",") if part.strip())


def _bool(name: str, default: bool) -> bool:
    raw = _env(name).lower()
    if not raw:
        return default
    return raw in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    # PDF parsing
    mineru_api_token: str = ""
    mineru_base_url: str = "https://mineru.net/api/v4"
    mineru_poll_interval_s: float = 3.0
    mineru_timeout_s: float = 600.0
    # chat / vision models (OpenAI-compatible)
    openai_api_key: str = ""
    openai_api_base: str = "https://dashscope.aliyuncs.com/compatible-mode/v1"
    llm_default_model: str = "qwen-flash"
    vl_model: str = "qwen3-vl-flash"
    llm_timeout_s: float = 60.0
    vl_max_requests: int = 10
    vl_window_s: float = 60.0
    # embeddings / reranker
    bge_m3_path: str = ""
    bge_device: str = "cpu"
    bge_fp16: bool = False
    bge_reranker_large: str = ""
    embed_batch_size: int = 8
    # model servers: when set they replace the in-process models
    embeddings_url: str = ""
    embeddings_model: str = "bge-m3"
    embeddings_api_key: str = ""
    embeddings_timeout_s: float = 30.0
    rerank_url: str = ""
    rerank_model: str = "bge-reranker-large"
    rerank_api_key: str = ""
    rerank_timeout_s: float = 30.0
    # vector store
    milvus_url: str = ""
    chunks_collection: str = "kb_chunks"
    product_collection: str = "kb_item_names"
    # history store
    mongo_url: str = ""
    mongo_db_name: str = "kb001"
    # object store
    minio_endpoint: str = ""
    minio_access_key: str = ""
    minio_secret_key: str = ""
    minio_bucket_name: str = "knowledge-base"
    minio_secure: bool = False
    # web search
    mcp_dashscope_base_url: str = ""
    mcp_api_key: str = ""
    # limits
    max_upload_mb: int = 100
    max_context_chars: int = 12000
    # who may use the app
    api_auth: bool = True
    api_keys: str = ""
    cors_origins: tuple[str, ...] = ()
    forwarded_allow_ips: str = ""   # proxies whose X-Forwarded-For / -Proto are believed; none by default
    auth_users: str = ""
    admin_password: str = ""
    login_max_failures: int = 5
    login_lock_s: float = 300.0
    login_delay_s: float = 0.5
    # remote images in uploaded documents
    remote_image_hosts: tuple[str, ...] = ()
    remote_image_max_mb: float = 5.0
    remote_image_timeout_s: float = 10.0
    # import queue: Redis when set, an SQLite file under data_dir otherwise
    redis_url: str = ""
    import_workers: int = 2
    import_in_app: bool = True      # the web process also consumes the queue
    import_retries: int = 2         # attempts after the first, for transient faults and dead workers
    import_retry_delay_s: float = 5.0  # doubled on every retry
    task_lease_s: float = 30.0      # a task whose worker stops renewing this long is handed on

    @property
    def milvus_uri(self) -> str:
        return self.milvus_url or str(self.data_dir / "milvus.db")

    @property
    def llm_enabled(self) -> bool:
        return bool(self.openai_api_key)

    @property
    def web_search_enabled(self) -> bool:
        return bool(self.mcp_dashscope_base_url)

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)


def load_settings() -> Settings:
    """Read the environment (after `.env`) into a fresh Settings."""
    load_dotenv(ROOT / ".env", override=False)
    data_dir = Path(_env("DATA_DIR", "./data"))
    if not data_dir.is_absolute():
        data_dir = (Path.cwd() / data_dir).resolve()
    return Settings(
        data_dir=data_dir,
        mineru_api_token=_env("MINERU_API_TOKEN"),
        mineru_base_url=_env("MINERU_BASE_URL", "https://mineru.net/api/v4").rstrip("/"),
        mineru_poll_interval_s=_float("MINERU_POLL_INTERVAL_S", 3.0),
        mineru_timeout_s=_float("MINERU_TIMEOUT_S", 600.0),
        openai_api_key=_env("OPENAI_API_KEY"),
        openai_api_base=_env("OPENAI_API_BASE", "https://dashscope.aliyuncs.com/compatible-mode/v1"),
        llm_default_model=_env("LLM_DEFAULT_MODEL", "qwen-flash"),
        vl_model=_env("VL_MODEL", "qwen3-vl-flash"),
        llm_timeout_s=_float("LLM_TIMEOUT_S", 60.0),
        vl_max_requests=_int("VL_MAX_REQUESTS", 10),
        vl_window_s=_float("VL_WINDOW_S", 60.0),
        bge_m3_path=_env("BGE_M3_PATH"),
        bge_device=_env("BGE_DEVICE", "cpu"),
        bge_fp16=_bool("BGE_FP16", False),
        bge_reranker_large=_env("BGE_RERANKER_LARGE"),
        embed_batch_size=_int("EMBED_BATCH_SIZE", 8),
        embeddings_url=_env("EMBEDDINGS_URL").rstrip("/"),
        embeddings_model=_env("EMBEDDINGS_MODEL", "bge-m3"),
        embeddings_api_key=_env("EMBEDDINGS_API_KEY"),
        embeddings_timeout_s=_float("EMBEDDINGS_TIMEOUT_S", 30.0),
        rerank_url=_env("RERANK_URL").rstrip("/"),
        rerank_model=_env("RERANK_MODEL", "bge-reranker-large"),
        rerank_api_key=_env("RERANK_API_KEY"),
        rerank_timeout_s=_float("RERANK_TIMEOUT_S", 30.0),
        milvus_url=_env("MILVUS_URL"),
        chunks_collection=_env("CHUNKS_COLLECTION", "kb_chunks"),
        product_collection=_env("PRODUCT_COLLECTION", "kb_item_names"),
        mongo_url=_env("MONGO_URL"),
        mongo_db_name=_env("MONGO_DB_NAME", "kb001"),
        minio_endpoint=_env("MINIO_ENDPOINT"),
        minio_access_key=_env("MINIO_ACCESS_KEY"),
        minio_secret_key=_env("MINIO_SECRET_KEY"),
        minio_bucket_name=_env("MINIO_BUCKET_NAME", "knowledge-base"),
        minio_secure=_bool("MINIO_SECURE", False),
        mcp_dashscope_base_url=_env("MCP_DASHSCOPE_BASE_URL"),
        mcp_api_key=_env("MCP_API_KEY") or _env("OPENAI_API_KEY"),
        max_upload_mb=_int("MAX_UPLOAD_MB", 100),
        max_context_chars=_int("MAX_CONTEXT_CHARS", 12000),
        api_auth=_env("API_AUTH", "on").lower() not in {"off", "0", "false", "no"},
        api_keys=_env("API_KEYS"),
        cors_origins=_list("CORS_ORIGINS"),
        forwarded_allow_ips=",".join(_list("FORWARDED_ALLOW_IPS")),
        auth_users=_env("AUTH_USERS"),
        admin_password=_env("ADMIN_PASSWORD"),
        login_max_failures=_int("LOGIN_MAX_FAILURES", 5),
        login_lock_s=_float("LOGIN_LOCK_S", 300.0),
        login_delay_s=_float("LOGIN_DELAY_S", 0.5),
        remote_image_hosts=tuple(h.lower() for h in _list("REMOTE_IMAGE_HOSTS")),
        remote_image_max_mb=_float("REMOTE_IMAGE_MAX_MB", 5.0),
        remote_image_timeout_s=_float("REMOTE_IMAGE_TIMEOUT_S", 10.0),
        redis_url=_env("REDIS_URL"),
        import_workers=max(1, _int("IMPORT_WORKERS", 2)),
        # with Redis the workers are usually separate processes (scripts/worker.sh)
        import_in_app=_bool("IMPORT_IN_APP", not _env("REDIS_URL")),
        import_retries=max(0, _int("IMPORT_RETRIES", 2)),
        import_retry_delay_s=_float("IMPORT_RETRY_DELAY_S", 5.0),
        task_lease_s=max(1.0, _float("TASK_LEASE_S", 30.0)),
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()


def reload_settings() -> Settings:
    """Forget the cached settings (tests point DATA_DIR elsewhere)."""
    get_settings.cache_clear()
    return get_settings()
