"""The parts of ``queuelake.notebook_support``, the one module the notebooks in ``notebooks/`` import: the
place a notebook runs in (``runner``), Spark rows to pandas and time buckets (``frames``), tables as text
(``tables``), a queue's rows (``queues``), duration units (``units``), value axes and bars (``axes``), time
axes (``time_charts``) and the runs figure (``runs_figure``). Imports nothing, like every package's ``__init__``.
"""
