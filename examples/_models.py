"""The chat model every example uses: an offline scripted fake, or a real one named in the environment.

The examples must run anywhere (no network, no key), so by default each model call returns the next
``AIMessage`` of a script, complete with ``usage_metadata`` and a model name, exactly what a real
provider's LangChain integration hands to the callbacks. Set ``RUN_JOURNAL_MODEL`` (for example
``openai:gpt-4o-mini``) to use a real model through ``langchain.chat_models.init_chat_model``
(``pip install langchain langchain-openai`` and the provider's API key); the script is then ignored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

FAKE_MODEL_NAME = "fake-gpt"
"""The model name the scripted replies report (what a pricing table is keyed by)."""


class ScriptedChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts ``bind_tools`` (the script already holds the tool calls).

    LangGraph's prebuilt agent binds the tools to the model; the fake has no tool schema to send
    anywhere, so binding returns the model unchanged.
    """

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def reply(text: str, *, tool_calls: Sequence[dict[str, Any]] = (), input_tokens: int = 40,
          output_tokens: int = 12) -> AIMessage:
    """One scripted model response with the usage a provider would report."""
    return AIMessage(
        content=text,
        tool_calls=[{"type": "tool_call", **call} for call in tool_calls],
        usage_metadata={"input_tokens": input_tokens, "output_tokens": output_tokens,
                        "total_tokens": input_tokens + output_tokens},
        response_metadata={"model_name": FAKE_MODEL_NAME},
    )


def chat_model(script: Sequence[AIMessage]) -> BaseChatModel:
    """The real model named by ``RUN_JOURNAL_MODEL``, else a fake that answers with ``script``."""
    spec = os.environ.get("RUN_JOURNAL_MODEL")
    if spec:
        try:
            from langchain.chat_models import init_chat_model
        except ImportError as error:
            raise SystemExit(
                f"RUN_JOURNAL_MODEL={spec} needs LangChain's model loader: "
                "pip install langchain langchain-<provider>"
            ) from error
        model: BaseChatModel = init_chat_model(spec)
        return model
    return ScriptedChatModel(messages=iter(list(script)))
