"""What every step of a turn uses, read once as the turn starts (``TurnSetup.load``)."""

from __future__ import annotations

from dataclasses import dataclass

from monark.chat.executor import ChatToolExecutor, ToolSpec
from monark.chat.llm.types import LlmMessage, LlmProvider, LlmRequest, ToolDefinition
from monark.chat.runtime import provider_for, runtime
from monark.chat.transcript import tool_definitions
from monark.core.rbac import Principal
from monark.core.settings import ChatSettings, chat_settings

DEFAULT_WINDOW = 128_000  # a provider nobody described


@dataclass(frozen=True)
class ContextPolicy:
    """The model's window in tokens, and the shares that stub results and summarize turns."""

    window: int
    stub_at: float
    compact_at: float

    @classmethod
    def of(cls, provider: str, provider_window: int | None, chat: ChatSettings) -> ContextPolicy:
        """The provider's window, or ``CHAT_CONTEXT_WINDOW`` on the deployment's own provider."""
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
        executor = runtime().executor
        specs = {s.name: s for s in executor.specs(principal)}
        return cls(
            provider=provider,
            provider_name=getattr(provider, "name", None) or resolved.config.provider,
            executor=executor,
            specs=specs,
            tools=tool_definitions(list(specs.values())),
            system=runtime().prompt.system(principal),
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
            paused=runtime().spend(principal, resolved.budget),
        )

    def request(self, messages: list[LlmMessage], max_tokens: int | None = None) -> LlmRequest:
        """A request of ``messages`` on the turn's cached prefix, for at most ``max_tokens``."""
        return LlmRequest(
            model=self.model,
            system=self.system,
            messages=messages,
            tools=self.tools,
            max_tokens=min(self.max_tokens, max_tokens or self.max_tokens),
        )
