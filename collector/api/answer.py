"""The base of the API's answers (`collector.api.models`): imports pydantic only."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Answer(BaseModel):
    """Base of every answer: unknown fields are kept, not dropped. A field whose name a model cannot take
    (`copy`) has an alias: dump with `by_alias=True` to get the JSON's names back."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
