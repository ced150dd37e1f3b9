"""Parsers of cluster counter formats into the long sample table.

One module per format; each exposes ``parse(text, host="localhost", ...) -> pd.DataFrame``
(the validated long table of :mod:`interplace.collectors.table`) and ``sniff(text) -> bool``
(does ``text`` look like this format?):

- :mod:`~interplace.collectors.formats.nvsmi_query`: ``nvidia-smi --query-gpu=... --format=csv``
- :mod:`~interplace.collectors.formats.dmon`: ``nvidia-smi dmon``
- :mod:`~interplace.collectors.formats.perf_stat`: ``perf stat -x, -I <ms>``
- :mod:`~interplace.collectors.formats.prometheus`: dcgm-exporter's Prometheus text exposition

Parsers never warn: counters a file marks unavailable are listed, sorted, in
``df.attrs["unsupported"]``.
"""
