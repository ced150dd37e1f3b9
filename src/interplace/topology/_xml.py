"""Safe parsing of untrusted XML (NCCL and hwloc topology files) with defusedxml.

Entity declarations (billion laughs, quadratic blow-up) and external entities are refused
before any expansion happens, so a hostile document fails fast with a one-line error.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import defusedxml.ElementTree as DET
from defusedxml import DefusedXmlException

from interplace.errors import InputError

__all__ = ["MAX_DEPTH", "parse_xml"]

#: Deepest element nesting accepted; real topology files nest fewer than 20 levels, and the
#: importers walk the tree recursively, so a hostile document must not go deeper.
MAX_DEPTH = 64


def parse_xml(data: str | bytes, what: str) -> ET.Element:
    """Parse ``data`` and return the root element; ``what`` names the document in errors.

    >>> parse_xml("<system version='1'/>", "demo.xml").tag
    'system'
    >>> parse_xml("<a><b></a>", "bad.xml")
    Traceback (most recent call last):
    ...
    interplace.errors.InputError: malformed XML in bad.xml: mismatched tag: line 1, column 8
    """
    try:
        root: ET.Element = DET.fromstring(data, forbid_dtd=False, forbid_entities=True,
                                          forbid_external=True)
    except DefusedXmlException as exc:
        raise InputError(f"refusing unsafe XML in {what}: {type(exc).__name__}") from None
    except ET.ParseError as exc:
        raise InputError(f"malformed XML in {what}: {exc}") from None
    stack = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"refusing XML in {what}: nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in el)
    return root
