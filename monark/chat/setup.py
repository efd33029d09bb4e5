"""What every step of a turn uses, read once as the turn starts (``TurnSetup.load``): the
provider, the tools, the system prompt, the limits, the model's context window, and what
the host's resolver put with them (the price, the budget)."""

from __future__ import annotations

from dataclasses import dataclass

from monark.chat.executor import ChatToolExecutor, ToolSpec
from monark.chat.llm.types import LlmMessage, LlmProvider, LlmRequest, ToolDefinition
from monark.chat.runtime import prompt_builder, provider_for, spend_closed, tool_executor
from monark.chat.transcript import tool_definitions
from monark.core.rbac import Principal
from monark.core.settings import ChatSettings, chat_settings

DEFAULT_WINDOW = 128_000  # a provider nobody described


@dataclass(frozen=True)
class ContextPolicy:
    """The model's context window, in tokens, and the shares of it that make old tool
    results stubs (``stub_at``) and old turns a summary (``compact_at``)."""

    window: int
    stub_at: float
    compact_at: float

    @classmethod
    def of(cls, provider: str, provider_window: int | None, chat: ChatSettings) -> ContextPolicy:
        """The provider's window, or the deployment's setting (``CHAT_CONTEXT_WINDOW``) for
        a turn on the deployment's own provider (an org's provider of its own keeps its own
        window: the setting is about the deployment's model)."""
        setting = chat.context_window if provider == chat.llm_provider else 0
        window = setting or provider_window or DEFAULT_WINDOW
        return cls(window, chat.context_stub_at, chat.context_compact_at)

    def tokens(self, share: float) -> int:
        return int(self.window * share)

    @property
    def keep(self) -> int:
        """Tokens the newest rows keep whole when results are stubbed or turns summarized."""
        return self.tokens(self.stub_at / 2)


@dataclass
class TurnSetup:
    """What every step of a turn uses: the provider, the tools, the system prompt, limits."""

    provider: LlmProvider
    provider_name: str
    executor: ChatToolExecutor
    specs: dict[str, ToolSpec]
    tools: list[ToolDefinition]
    system: str
    model: str
    max_tokens: int
    max_steps: int
    silence: float
    context: ContextPolicy
    price: object  # of its model, for the meter alone (``ResolvedAi.price``)
    budget: object  # the org's, read once a turn, for the spend check and meter alone
    # Why spend pauses the turn (asked as it starts, then after each reply), or None.
    paused: str | None = None

    @classmethod
    def load(cls, principal: Principal) -> TurnSetup:
        provider, resolved = provider_for(principal.org_id)
        executor = tool_executor()
        specs = {s.name: s for s in executor.specs(principal)}
        return cls(
            provider=provider,
            provider_name=getattr(provider, "name", None) or resolved.config.provider,
            executor=executor,
            specs=specs,
            tools=tool_definitions(list(specs.values())),
            system=prompt_builder().system(principal),
            model=resolved.config.model,
            max_tokens=resolved.limits.max_tokens,
            max_steps=resolved.limits.max_steps,
            silence=resolved.config.read_timeout,
            context=ContextPolicy.of(
                resolved.config.provider,
                resolved.descriptor.context_window if resolved.descriptor else None,
                chat_settings(),
            ),
            price=resolved.price,
            budget=resolved.budget,
            paused=spend_closed(principal, resolved.budget),
        )

    def request(self, messages: list[LlmMessage], max_tokens: int | None = None) -> LlmRequest:
        """A request of ``messages`` with the turn's model, system prompt and tools (its
        cached prefix), for at most ``max_tokens`` (the turn's own limit at most)."""
        return LlmRequest(
            model=self.model,
            system=self.system,
            messages=messages,
            tools=self.tools,
            max_tokens=min(self.max_tokens, max_tokens or self.max_tokens),
        )
