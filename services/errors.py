"""Exception hierarchy shared by the services and the graphs."""


class ImportProcessError(Exception):
    """Base of every error raised while importing or answering."""

    def __init__(self, message: str, node: str | None = None, cause: BaseException | None = None,
                 transient: bool = False):
        super().__init__(message)
        self.message = message
        self.node = node
        self.cause = cause
        self.transient = transient  # the same work may succeed later (a server 5xx, a time-out)

    def __str__(self) -> str:
        prefix = f"[{self.node}] " if self.node else ""
        return f"{prefix}{self.message}"


class ConfigurationError(ImportProcessError):
    pass


class StateFieldError(ImportProcessError):
    pass


class FileProcessingError(ImportProcessError):
    pass


class PdfConversionError(FileProcessingError):
    pass


class DocumentConversionError(FileProcessingError):
    pass


class ImageProcessingError(FileProcessingError):
    pass


class DocumentSplitError(ImportProcessError):
    pass


class EmbeddingError(ImportProcessError):
    pass


class RerankError(ImportProcessError):
    pass


class LLMError(ImportProcessError):
    pass


class StorageError(ImportProcessError):
    pass


class MilvusError(StorageError):
    pass


class MinioError(StorageError):
    pass


class ValidationError(ImportProcessError):
    pass


def is_transient(exc: BaseException) -> bool:
    """Worth retrying later: marked so, or caused (at any depth) by a time-out or a lost connection."""
    import httpx

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if getattr(exc, "transient", False) or isinstance(exc, (TimeoutError, ConnectionError, httpx.TransportError)):
            return True
        exc = getattr(exc, "cause", None) or exc.__cause__
    return False
