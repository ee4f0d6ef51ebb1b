"""The knowledge base over HTTP: products, documents, their chunks; rename / merge, delete, reindex.

Reading needs a signed-in user; every change needs an admin or an editor, and says who made it.
"""
from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query

from api.auth import current_user
from api.models import (
    Chunk, Document, DocumentDeleted, ErrorBody, Product, ProductDeleted, ProductRename, ProductRenamed,
    TaskStarted,
)
from api.routes import ERRORS, Editor, storage
from api.routing import ApiRoute
from graphs.importing import catalog, enqueue_reindex

DocId = Annotated[str, Path(max_length=64, description="文档 ID")]
ProductName = Annotated[str, Path(max_length=100, description="产品名")]
NOT_FOUND = {404: {"model": ErrorBody}}

log = logging.getLogger("api.catalog")

router = APIRouter(prefix="/api", tags=["knowledge base"], route_class=ApiRoute, responses=ERRORS,
                   dependencies=[Depends(current_user)])


def _call(fn, *args, **kwargs):
    """Run a catalogue action; its Chinese errors become 404 / 409 / 400, storage faults 503."""
    try:
        return storage(lambda: fn(*args, **kwargs))
    except catalog.NotFound as exc:
        raise HTTPException(404, exc.message) from exc
    except catalog.ProductExists as exc:
        raise HTTPException(409, exc.message) from exc
    except catalog.ValidationError as exc:
        raise HTTPException(400, exc.message) from exc


@router.get("/products", response_model=list[Product], summary="知识库里的产品")
def products():
    return _call(catalog.products)


@router.get("/documents", response_model=list[Document], summary="文档列表（可按产品筛选）")
def documents(product: Annotated[str | None, Query(max_length=100)] = None):
    return _call(catalog.documents, product)


@router.get("/documents/{doc_id}", response_model=Document, responses=NOT_FOUND, summary="一份文档的记录")
def document(doc_id: DocId):
    return _call(catalog.document, doc_id)


@router.get("/documents/{doc_id}/chunks", response_model=list[Chunk], responses=NOT_FOUND, summary="一份文档的切片")
def document_chunks(doc_id: DocId):
    return _call(catalog.document_chunks, doc_id)


@router.delete("/documents/{doc_id}", response_model=DocumentDeleted, responses=NOT_FOUND,
               summary="删除一份文档（切片、图片、原件、记录）")
def delete_document(doc_id: DocId, user: Editor):
    log.warning("document %s deleted by %s", doc_id, user.name)  # nothing of it is left to carry the name
    return _call(catalog.delete_document, doc_id)


@router.patch("/products/{name}", response_model=ProductRenamed, responses={**NOT_FOUND, 409: {"model": ErrorBody}},
              summary="产品改名（改成已有的产品名需 merge=true：合并）和/或设置别名")
def change_product(name: ProductName, body: ProductRename, user: Editor):
    """Aliases first, under the old name: a rename then carries them over."""
    aliases = _call(catalog.set_aliases, name, body.aliases, updated_by=user.name) if body.aliases is not None else None
    if body.new_name is None:
        docs = _call(catalog.documents, name)
        return {"product": name, "documents": len(docs), "chunks": 0, "merged": False, "aliases": aliases}
    result = _call(catalog.rename_product, name, body.new_name, merge=body.merge, updated_by=user.name)
    return {**result, "aliases": _call(catalog.product_aliases, result["product"])}


@router.delete("/products/{name}", response_model=ProductDeleted, responses=NOT_FOUND, summary="删除一个产品的全部文档")
def delete_product(name: ProductName, user: Editor):
    log.warning("product %r deleted by %s", name, user.name)
    return _call(catalog.delete_product, name)


@router.post("/reindex", response_model=TaskStarted, status_code=202,
             summary="重建索引：按原件重新导入全部文档（更换向量模型后需要），进度见 /api/status/{task_id}")
def reindex(user: Editor):
    return {"task_id": _call(enqueue_reindex, user.name)}
