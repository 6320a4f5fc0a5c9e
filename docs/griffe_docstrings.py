"""A Griffe extension that reads the codebase's docstring conventions for the API pages.

The docstrings are Google style with two habits of Sphinx that Markdown does not know:

- roles such as ``:class:`Posterior``` or ``:func:`~lit_bayes.health.assess```: each becomes an
  optional cross-reference (a link where the target has an API page, inline code otherwise),
  its name resolved in the scope of the object that holds the docstring;
- section headers with a remark, ``Args (besides :class:`SamplerModule`'s):``: the remark becomes
  a line of its own above a plain ``Args:`` header, so the arguments are parsed as a section.
"""
from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc):`(~?)([^`]+)`")
REMARKED_HEADER = re.compile(r"^(\s*)(Args|Attributes) \((.+)\):\s*$", flags=re.MULTILINE)


def _identifier(scope: griffe.Object, target: str) -> str:
    """The full path of ``target`` as seen from ``scope`` (itself when it cannot be resolved)."""
    head, _, rest = target.partition(".")
    try:
        resolved = scope.resolve(head)
    except (griffe.NameResolutionError, ValueError):
        return target
    return f"{resolved}.{rest}" if rest else resolved


def convert(text: str, scope: griffe.Object) -> str:
    """``text`` with its roles as optional cross-references and its remarked headers split."""
    def role(match: re.Match) -> str:
        short, target = match.group(1), match.group(2).rstrip("()")
        title = target.rsplit(".", 1)[-1] if short else target
        identifier = html.escape(_identifier(scope, target), quote=True)
        return f'<autoref identifier="{identifier}" optional><code>{html.escape(title)}</code></autoref>'

    def header(match: re.Match) -> str:
        indent, section, remark = match.groups()
        return f"{indent}{remark[0].upper()}{remark[1:]}:\n\n{indent}{section}:"

    return ROLE.sub(role, REMARKED_HEADER.sub(header, text))


class SphinxRoles(griffe.Extension):
    """Converts the docstrings of a package and everything in it once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._convert_tree(pkg, set())

    def _convert_tree(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value, obj)
        for member in obj.members.values():
            if not member.is_alias:
                self._convert_tree(member, seen)
