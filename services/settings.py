"""One typed settings object, read from the environment and `.env` (pydantic-settings).

Every field has a working default, written once below, so that a fresh checkout runs with no server
and no key; each field is read from the environment variable of its name in capitals (`DATA_DIR`,
`MILVUS_URL`, ...), and an empty variable counts as unset. Nothing here opens a connection.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from dotenv import load_dotenv
from pydantic import AfterValidator, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent

# A comma-separated environment variable ("a.example, b.example"), not JSON.
CommaList = Annotated[tuple[str, ...], NoDecode]


def at_least(floor: float) -> AfterValidator:
    """A number below its floor is raised to it, as a working default would be."""
    return AfterValidator(lambda value: max(floor, value))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, env_ignore_empty=True, str_strip_whitespace=True,
                                      extra="ignore")

    data_dir: Path = Path("./data")
    # PDF parsing
    mineru_api_token: str = ""
    mineru_base_url: str = "https://mineru.net/api/v4"
    mineru_poll_interval_s: float = 3.0
    mineru_timeout_s: float = 600.0
    # every converter of native code (PDF, Word, web page) runs in a child process with these limits
    convert_timeout_s: Annotated[float, at_least(1.0)] = 900.0   # wall clock; above mineru_timeout_s, which is waited for inside
    convert_memory_mb: Annotated[int, at_least(64)] = 2048      # address space a conversion may add (RLIMIT_AS)
    convert_crash_retries: Annotated[int, at_least(0)] = 1     # a conversion that crashed its process is tried this often more
    converter_override: str = ""       # "module:function" run instead of every converter (fault drills)
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
    # vector store (the product collection keeps the name data folders were written with)
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
    # web search (its key is the chat model's unless given)
    mcp_dashscope_base_url: str = ""
    mcp_api_key: str = ""
    # limits
    max_upload_mb: int = 100
    archive_max_files: int = 2000   # entries of one uploaded .zip / .tar.gz
    archive_max_mb: int = 1000      # its unpacked size: a zip bomb is refused before it fills the disk
    max_context_chars: int = 12000
    # Offline grading: evidence under the refusal floor after the rewrite is "not known" (on) or
    # answered with a caution (off: measured on left-out corpora, the floor lost found answers)
    offline_refusal: bool = False
    # who may use the app ("API_AUTH=off" only for development on 127.0.0.1)
    api_auth: bool = True
    api_keys: str = ""
    cors_origins: CommaList = ()
    forwarded_allow_ips: str = ""   # proxies whose X-Forwarded-For / -Proto are believed; none by default
    auth_users: str = ""
    admin_password: str = ""
    login_max_failures: int = 5
    login_lock_s: float = 300.0
    login_delay_s: float = 0.5
    # remote images in uploaded documents
    remote_image_hosts: CommaList = ()
    remote_image_max_mb: float = 5.0
    remote_image_timeout_s: float = 10.0
    # import queue: Redis when set, an SQLite file under data_dir otherwise
    redis_url: str = ""
    import_workers: Annotated[int, at_least(1)] = 2
    # the web process also consumes the queue; with Redis the workers are usually separate
    # processes (scripts/worker.sh), so unset it follows REDIS_URL
    import_in_app: bool = True
    import_retries: Annotated[int, at_least(0)] = 2               # attempts after the first, for transient faults and dead workers
    import_retry_delay_s: float = 5.0     # doubled on every retry
    task_lease_s: Annotated[float, at_least(1.0)] = 30.0            # a task whose worker stops renewing this long is handed on

    @field_validator("cors_origins", "remote_image_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("remote_image_hosts")
    @classmethod
    def _lower_hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(host.lower() for host in value)

    @field_validator("mineru_base_url", "embeddings_url", "rerank_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        return value.rstrip("/")

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value if value.is_absolute() else (Path.cwd() / value).resolve()

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, values: Any) -> Any:
        if isinstance(values, dict):
            if "import_in_app" not in values:
                values = {**values, "import_in_app": not values.get("redis_url")}
            if not values.get("mcp_api_key") and values.get("openai_api_key"):
                values = {**values, "mcp_api_key": values["openai_api_key"]}
        return values

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
        """A copy with some fields changed (validated like the environment's values)."""
        return type(self).model_validate({**self.model_dump(), **changes})


def load_settings() -> Settings:
    """Read the environment (after `.env`, which also reaches libraries that read os.environ) into a
    fresh Settings."""
    load_dotenv(ROOT / ".env", override=False)
    return Settings()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()


def reload_settings() -> Settings:
    """Forget the cached settings (tests point DATA_DIR elsewhere)."""
    get_settings.cache_clear()
    return get_settings()
