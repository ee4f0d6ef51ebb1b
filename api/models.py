"""Request and response bodies of the HTTP API (they are what the OpenAPI schema shows)."""
from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

# Session ids travel in URLs and as database keys: keep them plain.
SESSION_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
# The query graph uses the first 2000 characters (and says so in `warnings`); longer than this is refused.
MAX_QUESTION_CHARS = 10_000


class ErrorBody(BaseModel):
    error: str = Field(description="中文错误说明")
    detail: list[dict] | None = Field(None, description="参数校验失败时的逐项说明")
    session_id: str | None = Field(None, description="回答失败时：所属会话")
    node: str | None = Field(None, description="回答失败时：出错的节点")


class UploadForm(BaseModel):
    """The form fields of POST /api/upload beside its files."""
    product: str | None = Field(None, max_length=200, description="指定商品名（覆盖自动识别）")
    products: str | None = Field(None, max_length=20000, description='每个文件的产品：JSON 对象 {"文件名": "产品名"}')


class UploadResponse(BaseModel):
    task_ids: list[str] = Field(description="每份文档一个导入任务，顺序与上传顺序相同；压缩包里的每份文档各一个")
    files: list[str] = Field(default_factory=list, description="与 task_ids 一一对应的文件名（压缩包里的文档带上它在包内的路径）")
    notes: list[str] = Field(default_factory=list, description="每个压缩包一行：导入了几份文档、几张图片，哪些文件没有导入及原因")


class TaskStatus(BaseModel):
    task_id: str
    status: Literal["pending", "processing", "completed", "failed"]
    file_name: str = ""
    requested_product: str | None = Field(None, description="导入时指定的产品")
    by: str = Field("", description="发起导入的用户")
    done_list: list[str] = Field(default_factory=list, description="已完成的节点")
    running_list: list[str] = Field(default_factory=list, description="正在运行的节点")
    error: str | None = Field(None, description="失败原因；pending 时是等待重试的原因")
    progress: str | None = Field(None, description="长任务（重建索引）的进度")
    attempts: int = Field(0, description="已开始的次数：暂时性故障或处理进程意外退出后会重试")
    product: str | None = None
    chunks: int | None = None
    created: float | None = None
    updated: float | None = None


class QueryRequest(BaseModel):
    query: str = Field(max_length=MAX_QUESTION_CHARS,
                       description="用户问题；超过 2000 字时只使用前 2000 字，并在 warnings 中说明")
    session_id: str | None = Field(None, pattern=SESSION_ID_PATTERN, description="会话 ID，不传则自动生成")
    is_stream: bool = Field(False, description="true：立即返回 session_id，答案经 GET /api/stream/{session_id} 推送")
    product: str | None = Field(None, max_length=200, description="指定产品（跳过产品识别）")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("问题不能为空")
        return value


class Source(BaseModel):
    index: int
    source: str = Field(description="local（说明书）或 web（联网搜索）")
    chunk_id: str = ""
    title: str = ""
    file_title: str = ""
    product: str = ""
    url: str = ""
    score: float = 0.0
    content: str = ""


class Answer(BaseModel):
    """The `final` SSE event and the body of a non-streamed answer."""
    session_id: str
    status: Literal["completed"] = "completed"
    original_query: str = ""
    answer: str
    branch: str | None = Field(None, description="confirmed：已确认产品；ask：需要选择产品；refuse：知识库无相关产品")
    products: list[str] = Field(default_factory=list)
    candidates: list[str] = Field(default_factory=list)
    image_urls: list[str] = Field(default_factory=list, description="只来自本地说明书资料中的图片")
    sources: list[Source] = Field(default_factory=list)
    done_list: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class StreamStarted(BaseModel):
    session_id: str


class HistoryMessage(BaseModel):
    id: str
    role: str
    text: str
    rewritten_query: str = ""
    products: list[str] = Field(default_factory=list)
    image_urls: list[str] = Field(default_factory=list)
    status: str = "complete"
    ts: float


class History(BaseModel):
    session_id: str
    messages: list[HistoryMessage]


class HistoryDeleted(BaseModel):
    session_id: str
    deleted: int


class Check(BaseModel):
    backend: str = Field(description="正在使用的后端或模型")
    ok: bool | None = Field(description="是否可用；null 表示未配置、无需检查")
    error: str | None = None
    ms: float | None = Field(None, description="检查耗时（毫秒）")


class ChatModelCheck(Check):
    configured: bool


class ModelChecks(BaseModel):
    embedder: Check
    reranker: Check
    chat: ChatModelCheck


class Health(BaseModel):
    status: Literal["ok", "degraded"]
    vector_store: Check
    history_store: Check
    object_store: Check
    task_queue: Check = Field(description="导入队列：sqlite（本地）或 redis")
    models: ModelChecks


class ProductAlias(BaseModel):
    alias: str
    of: str = Field("product", description="product：指这款产品；brand：指它的品牌")
    source: str = Field(description="document：文档里写的；user：有人添加的")
    by: str = Field("", description="添加的人")


class Product(BaseModel):
    product: str
    documents: int = Field(description="已导入的文档数")
    chunks: int = Field(description="切片总数")
    brand: str = Field("", description="品牌")
    model: str = Field("", description="型号（系列词 + 型号代码）")
    variant: str = Field("", description="变体（型号之后的词，如 CAN、Pi）")
    version: str = Field("", description="版本（如 V1.1）")
    aliases: list[ProductAlias] = Field(default_factory=list, description="别名：文档里写的，以及有人添加的")


class Document(BaseModel):
    doc_id: str
    file_name: str | None = None
    product: str | None = None
    product_source: str | None = Field(None, description="user / remembered / set / known / llm / offline / page / recovered")
    product_evidence: str | None = Field(None, description="为什么是这个产品（识别依据，或“请确认”）")
    status: str = Field(description="importing / ready / damaged")
    source: str | None = Field(None, description="path（命令行导入）或 upload（上传）")
    pages: int | None = None
    chunks: int | None = None
    images_resolved: int | None = None
    images_missing: int | None = None
    bytes: int | None = None
    imported_at: float | None = None
    embedder: str | None = None
    updated_by: str | None = None
    error: str | None = None


class Chunk(BaseModel):
    chunk_id: str
    title: str
    parent_title: str
    part: int
    page_start: int = Field(0, description="PDF 切片的起始页（Markdown 为 0）")
    page_end: int = Field(0, description="PDF 切片的结束页")
    content: str
    images: list[str] = Field(default_factory=list, description="切片里的图片地址")


class DocumentDeleted(BaseModel):
    doc_id: str
    file_name: str | None = None
    chunks: int
    objects: int = Field(description="删除的图片与原件数")


class ProductRename(BaseModel):
    new_name: str | None = Field(None, min_length=1, max_length=100, description="新的产品名")
    merge: bool = Field(False, description="新名称已存在时必须为 true：把两个产品合并")
    aliases: list[Annotated[str, Field(max_length=200)]] | None = Field(
        None, max_length=50, description="产品的别名（整张清单：新加的记在你名下，未列出的被删除；文档导入不会再加回）")

    @model_validator(mode="after")
    def _something(self):
        if self.new_name is None and self.aliases is None:
            raise ValueError("请给出新的产品名（new_name）或别名清单（aliases）")
        return self


class ProductRenamed(BaseModel):
    product: str
    documents: int
    chunks: int
    merged: bool
    aliases: list[ProductAlias] = Field(default_factory=list)


class ProductDeleted(BaseModel):
    product: str
    documents: list[str]


class TaskStarted(BaseModel):
    task_id: str
