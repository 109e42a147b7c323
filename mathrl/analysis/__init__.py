"""The analysis: what the results say, from the files the runs wrote, without torch.

The readers of run outputs and the registered measures of a run, the statistics of a verdict
and the claims engine, the coverage of the documents and the seed plan, the study modules (one
per document, and the generic view), the tables, figures and the HTML report, `mathrl compare`,
and the import of other frameworks' logs. It runs no model: what it needs from one (a carry
probe, a gradient variance) a run or a probe of the engine has written to a file. An import test
holds it to torch-free code and to the engine's pure helpers it names.
"""
