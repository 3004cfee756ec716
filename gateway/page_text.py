"""Text from outside (a tenant's plan, prompt or catalog, a provider's error) on the operator's pages:
HTML-escaped, each character the tenant-text rule refuses shown as its escape (contracts/tenant_text.py:
a row written before the rule, or by an operator's import), and set in its own direction (`<bdi>`),
so that neither a bidi control nor right-to-left text reorders what stands around it."""

from __future__ import annotations

from html import escape

from contracts.tenant_text import shown


def text(value: object) -> str:
    """An element's content."""
    return f"<bdi>{escape(shown(str(value)))}</bdi>"


def attr(value: object) -> str:
    """An attribute's value, or text where no element may stand (an `<option>`, a `<title>`)."""
    return escape(shown(str(value)))
