"""A batch of requests through one `Translator.translate` call, and its results back per request.

Every request's sentences go into one list.  For a document-context model each request is
its own document (`"document": true`: its sentences in order) or each sentence its own
(`false`), given as document ids, so one request's sentences never see another's.
"""
from __future__ import annotations

from ctxnmt.serve.batching import Batch
from ctxnmt.serve.signals import Signals, attention_values


class BatchDecoder:
    def __init__(self, translator):
        self.translator = translator
        self.signals = Signals.of(translator)

    def __call__(self, batch: Batch) -> list[dict]:
        jobs = batch.jobs
        lines = [line for job in jobs for line in job.lines]
        doc_ids = self._document_ids(batch) if self.signals.document_context else None
        translations = self.translator.translate(lines, beam=jobs[0].beam, nbest=jobs[0].nbest,
                                                 batch_size=max(1, len(lines)),
                                                 return_attention=any(j.attention for j in jobs), doc_ids=doc_ids,
                                                 length=dict(jobs[0].length))
        out, start = [], 0
        for job in jobs:
            mine = translations[start: start + len(job.lines)]
            out.append({"batch": {"number": batch.number, "sentences": batch.sentences},
                        "sentences": self._results(job, mine, start)})
            start += len(job.lines)
        return out

    @staticmethod
    def _document_ids(batch: Batch) -> list[str]:
        ids = []
        for j, job in enumerate(batch.jobs):
            ids += [f"{j}" if job.document else f"{j}.{i}" for i in range(len(job.lines))]
        return ids

    def _results(self, job, translations, start: int) -> list[dict]:
        """`start`: the batch's number of the job's first line (the translations' context counts in the batch)."""
        results = [{"translation": t.text, "score": round(t.score, 4),
                    "nbest": [{"translation": h.text, "score": round(h.score, 4)} for h in t.nbest]}
                   for t in translations]
        if job.attention:
            for result, values in zip(results, attention_values(self.signals, translations)):
                result.update(values)
        if job.document:
            for result, t in zip(results, translations):
                result["context"] = [line - start for line in t.context]
        return results
