"""Model profiles: what a model family accepts and how it bills, per family, not per id.

Shipped in ``profiles.yaml`` (package data, next to ``prices.yaml``) and overridden by a
project's ``kind: ModelProfiles`` documents. A profile is chosen for a model id by its
``match`` globs (the most specific match wins, a project's over a shipped one), or named
outright by an agent's ``model.profile``. Requests are built from it
(:func:`runner.model.wire.request_body` sends ``profile.tokens_field``), ``runner validate``
refuses what it does not accept (:mod:`runner.config.profile_checks`), and the pricer bills a
service tier the way it says (:func:`runner.config.prices.tier_price`).

Prices stay in one place: every USD rate is in ``prices.yaml`` / ``kind: Prices``; a profile
only says which of a price's rates a tier bills at (``standard``, ``batch`` or ``priority``), and
which tier the provider may serve a tier's request at instead (``tier_fallback``): a call is
reserved against the caps at the dearer of the two (:meth:`ModelProfile.reserved_billing`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from runner.config.documents import Document, escape_pointer_token
from runner.config.specs import BatchApiLimits

if TYPE_CHECKING:
    from runner.errors import Problem

TokensField = Literal["max_tokens", "max_completion_tokens"]
"""The request field that bounds the completion (reasoning included, on reasoning models)."""

TierBilling = Literal["standard", "batch", "priority"]
"""Which rates of a model's price a service tier bills at: the live price, the Batch API's
(OpenAI's flex tier), or the price's ``priority_*`` rates."""

BatchFlavour = Literal["openai", "anthropic"]
"""The shape of a provider's Batch API: ``/v1/files`` + ``/v1/batches`` (OpenAI, Azure and
compatible servers), or Anthropic's Message Batches."""

SERVICE_TIERS = ("auto", "default", "flex", "priority")
"""The values ``model.service_tier`` may take (a profile lists the ones its family accepts)."""

SERVED_TIERS: Mapping[str, TierBilling] = {
    "default": "standard", "standard": "standard", "scale": "standard", "flex": "batch", "batch": "batch",
    "priority": "priority",
}  # fmt: skip
"""How a call bills by the tier its answer says served it: OpenAI's ``service_tier`` (``default``,
``flex``, ``scale``, ``priority``), Anthropic's ``usage.service_tier`` (``standard``, ``priority``,
``batch``)."""

BILLING_ORDER: tuple[TierBilling, ...] = ("batch", "standard", "priority")
"""The tiers' billings, cheapest first (a price's batch rates are below its standard ones, its
priority rates above)."""

DEFAULT_PROFILE = "default"
"""The profile of a model no other profile matches (any OpenAI-compatible model)."""


@dataclass(frozen=True)
class BatchApiProfile:
    """A family's Batch API: its flavour and what one provider batch may hold."""

    flavour: BatchFlavour
    limits: BatchApiLimits


@dataclass(frozen=True)
class ModelProfile:
    """What one model family accepts and how its service tiers bill."""

    name: str
    match: tuple[str, ...] = ()  # globs over the model id (and its part after the last "/")
    tokens_field: TokensField = "max_tokens"
    temperature: bool = True
    top_p: bool = True
    reasoning_efforts: tuple[str, ...] = ()  # empty: model.reasoning_effort is refused
    service_tiers: Mapping[str, TierBilling] = field(default_factory=dict)  # empty: model.service_tier is refused
    strict_json_schema: bool = False  # response_format {type: json_schema, strict: true}
    batch_api: BatchApiProfile | None = None  # None: --via batch-api is refused (see providers.no_batch_api_message)
    tier_fallback: Mapping[str, str] = field(default_factory=dict)  # tier asked -> the tier the provider may serve it at instead

    def tier_billing(self, tier: str | None) -> TierBilling:
        """How a call at ``tier`` bills (``None``: no tier sent, the standard price)."""
        return "standard" if tier is None else self.service_tiers.get(tier, "standard")

    def served_billing(self, asked: str | None, served: str | None) -> TierBilling:
        """How a call asked at tier ``asked`` bills when its answer says tier ``served`` served it
        (the provider may serve another: OpenAI's flex or priority request at ``default``); an
        answer that names no tier, or one unknown here (``auto``), bills as asked."""
        if served is None or served == asked or served not in SERVED_TIERS:
            return self.tier_billing(asked)
        return SERVED_TIERS[served]

    def reserved_billing(self, asked: str | None) -> TierBilling:
        """What a call asked at tier ``asked`` reserves at: the dearer of the tier asked and the
        one ``tier_fallback`` says the provider may serve it at instead. With no fallback (what
        OpenAI and Azure document for flex: a request flex cannot serve is refused with 429
        "Resource Unavailable", unbilled), a flex call reserves at flex rates, so the caps let a
        flex agent spend its budget at flex prices. ``auto`` (and no tier) reserves at standard
        rates unless the profile says ``tier_fallback: {auto: priority}``; an answer served at a
        dearer tier than reserved is still billed at it, and named in the run's warnings."""
        billing = self.tier_billing(asked)
        fallback = self.tier_fallback.get(asked) if asked is not None else None
        if fallback is None:
            return billing
        return max(billing, self.tier_billing(fallback), key=BILLING_ORDER.index)


def shipped_profiles() -> dict[str, ModelProfile]:
    """The profiles shipped with the runner (a new dict; the file is parsed once per process)."""
    return dict(_shipped())


@cache
def _shipped() -> tuple[tuple[str, ModelProfile], ...]:
    from runner.config.yamlload import load_text  # PyYAML only when the shipped file is read

    text = resources.files("runner.config").joinpath("profiles.yaml").read_text("utf-8")
    (doc,) = load_text(text, "runner/config/profiles.yaml", Path("profiles.yaml"))
    return tuple(merge_profiles({}, doc.data["profiles"]).items())


def build_profiles(doc: Document, known: Mapping[str, ModelProfile]) -> dict[str, ModelProfile]:
    """``known`` with a ``kind: ModelProfiles`` document applied (see :func:`merge_profiles`)."""
    return merge_profiles(known, doc.data["profiles"])


def new_profiles_without_match(doc: Document, known: Mapping[str, ModelProfile]) -> list[Problem]:
    """A problem for each entry of ``doc`` that adds a profile without saying ``match``: it
    starts from the default profile, whose ``*`` would otherwise take every model."""
    return [
        doc.problem(f"/profiles/{escape_pointer_token(name)}", f"profile '{name}' is new (not one of {', '.join(known)}): "
                    "give it match: [globs over model ids], e.g. match: [\"qwen3*\"] (match: [] if agents name it by model.profile only)")
        for name, entry in doc.data["profiles"].items()
        if name not in known and "match" not in entry
    ]  # fmt: skip


def merge_profiles(known: Mapping[str, ModelProfile], entries: Mapping[str, Mapping[str, Any]]) -> dict[str, ModelProfile]:
    """``known`` with ``entries`` applied in order: an entry naming a known profile changes the
    fields it gives; a new one starts from the default profile (its ``match`` required by the
    schema), so a project only says how its model differs."""
    merged = dict(known)
    for name, entry in entries.items():
        base = merged.get(name) or replace(merged.get(DEFAULT_PROFILE, ModelProfile(DEFAULT_PROFILE)), name=name, match=())
        merged[name] = replace(base, **_fields(entry))
    return merged


def _fields(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A YAML profile entry as :class:`ModelProfile` field values."""
    out: dict[str, Any] = {}
    for key, value in entry.items():
        if key in ("match", "reasoning_efforts"):
            out[key] = tuple(value)
        elif key in ("service_tiers", "tier_fallback"):
            out[key] = dict(value)
        elif key == "batch_api":
            out[key] = None if value is None else BatchApiProfile(
                value["flavour"], BatchApiLimits(value["max_requests"], value["max_file_bytes"])
            )
        else:
            out[key] = value
    return out


def profile_entry(profile: ModelProfile) -> dict[str, Any]:
    """``profile`` as a YAML/JSON entry (the inverse of :func:`merge_profiles` over nothing)."""
    batch = profile.batch_api
    return {
        "match": list(profile.match), "tokens_field": profile.tokens_field, "temperature": profile.temperature,
        "top_p": profile.top_p, "reasoning_efforts": list(profile.reasoning_efforts),
        "service_tiers": dict(profile.service_tiers), "tier_fallback": dict(profile.tier_fallback),
        "strict_json_schema": profile.strict_json_schema,
        "batch_api": None if batch is None else {
            "flavour": batch.flavour, "max_requests": batch.limits.max_requests, "max_file_bytes": batch.limits.max_file_bytes,
        },
    }  # fmt: skip


def find_profile(profiles: Mapping[str, ModelProfile], model_id: str, named: str | None = None) -> ModelProfile:
    """The profile of ``model_id``: the one ``named`` (an agent's ``model.profile``), else the
    one whose ``match`` globs fit it most specifically (the longest glob before its first
    wildcard; on a tie the later one, so a project's wins over a shipped one), else the
    default profile."""
    if named is not None and named in profiles:
        return profiles[named]
    bare = model_id.rsplit("/", 1)[-1]
    best: tuple[int, int, ModelProfile] | None = None
    for order, profile in enumerate(profiles.values()):
        for pattern in profile.match:
            if fnmatchcase(model_id, pattern) or fnmatchcase(bare, pattern):
                rank = (_specificity(pattern), order, profile)
                best = rank if best is None or rank[:2] > best[:2] else best
    if best is not None:
        return best[2]
    return profiles.get(DEFAULT_PROFILE) or ModelProfile(DEFAULT_PROFILE)


def _specificity(pattern: str) -> int:
    """How much of ``pattern`` is literal before its first wildcard."""
    cut = min((i for i, c in enumerate(pattern) if c in "*?["), default=len(pattern))
    return cut * 2 + (1 if cut == len(pattern) else 0)  # an exact id beats a glob of the same prefix
