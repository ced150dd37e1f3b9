"""Safe parsing of untrusted XML (NCCL and hwloc topology files) with defusedxml.

Entity declarations (billion laughs, quadratic blow-up) and external entities are refused
before any expansion happens, so a hostile document fails fast with a one-line error.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import defusedxml.ElementTree as DET
from defusedxml import DefusedXmlException

from interplace.errors import InputError

__all__ = ["parse_xml"]


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
    return root
