"""Exception hierarchy shared by the services and the graphs."""


class ImportProcessError(Exception):
    """Base of every error raised while importing or answering."""

    def __init__(self, message: str, node: str | None = None, cause: BaseException | None = None):
        super().__init__(message)
        self.message = message
        self.node = node
        self.cause = cause

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
