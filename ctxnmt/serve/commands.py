"""`ctxnmt serve`."""
from __future__ import annotations

import signal
import time

from ctxnmt import length_options as length
from ctxnmt.decoding.commands import add_precision, check_device, use_precision_flag
from ctxnmt.decoding.translator import Translator
from ctxnmt.errors import ConfigError, CtxnmtError
from ctxnmt.serve import settings
from ctxnmt.serve.batching import Batch, Job
from ctxnmt.serve.decoding import BatchDecoder
from ctxnmt.serve.processes import DecodingProcesses
from ctxnmt.serve.settings import Limits, ServeSettings
from ctxnmt.utils.arguments import add_checkpoint, add_model_dirs
from ctxnmt.utils.checkpoint import checkpoint_file


def register(sub) -> None:
    p = sub.add_parser("serve",
                       description="Serve a trained model, or an ensemble of several, over HTTP: a JSON API "
                                   "(/v1/translate, /v1/models, /health) whose requests are batched together, and "
                                   "a web page that shows what the model attends to (docs/serve.md).")
    add_model_dirs(p, "an ensemble, decoded together (same preprocessing and vocabularies)")
    p.add_argument("--ensemble-mode", choices=("logprob", "prob"), default="logprob",
                   help="combine members by averaging log-probabilities (default) or probabilities")
    p.add_argument("--device", default="cpu", help="where to decode: cpu (default), cuda or cuda:N")
    add_checkpoint(p)
    add_precision(p)
    p.add_argument("--host", default=settings.HOST, help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=settings.PORT, help="port (default: %(default)s)")
    p.add_argument("--beam", type=int, help="beam size when a request gives none (default: the config's)")
    p.add_argument("--max-batch-sents", type=int, default=settings.MAX_BATCH_SENTS,
                   help="close a batch at this many sentences (default: %(default)s; 1 turns batching off)")
    p.add_argument("--max-wait-ms", type=float, default=settings.MAX_WAIT_MS,
                   help="close a batch this long after its first request (default: %(default)s)")
    p.add_argument("--workers", type=int,
                   help="on the CPU, decode each batch in N forked processes of one thread each, its requests "
                        "dealt among them (default: the config's decoding.workers, 1)")
    p.add_argument("--max-request-sents", type=int, default=settings.MAX_REQUEST_SENTS,
                   help="sentences per request (default: %(default)s)")
    p.add_argument("--max-chars", type=int, default=settings.MAX_CHARS,
                   help="characters per request (default: %(default)s)")
    p.add_argument("--max-line-words", type=int, default=settings.MAX_LINE_WORDS,
                   help="words per sentence (default: %(default)s)")
    length.add_arguments(p, default="the config's; a request may set its own")
    p.set_defaults(func=cmd_serve)


def _check(args) -> None:
    for name in ("port", "workers", "max_batch_sents", "max_request_sents", "max_chars", "max_line_words", "beam"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, not {value}")
    if args.port > 65535:
        raise ConfigError(f"--port must be at most 65535, not {args.port}")
    if args.max_wait_ms < 0:
        raise ConfigError(f"--max-wait-ms must not be negative, not {args.max_wait_ms}")
    check_device(args.device)


def cmd_serve(args) -> int:
    # The web stack is an optional dependency of the server alone: every other command (on
    # a GPU machine without fastapi, say) loads without it.
    import uvicorn

    from ctxnmt.serve.app import SERVER_LOG, create_app

    _check(args)
    options = length.from_arguments(args)
    log = SERVER_LOG
    start = time.perf_counter()
    model_dirs = args.model_dirs
    checkpoint = args.checkpoint and checkpoint_file(model_dirs[0], args.checkpoint)
    translator = Translator.load(model_dirs if len(model_dirs) > 1 else model_dirs[0], checkpoint=checkpoint,
                                 device=args.device, ensemble_mode=args.ensemble_mode)
    translator.warn = log
    use_precision_flag(translator, args.precision)
    translator.length_control(options)  # a bad combination with the model's config: refused at start
    beam = args.beam or translator.config.decoding.beam
    if beam > settings.MAX_BEAM:
        raise ConfigError(f"--beam must be at most {settings.MAX_BEAM}, not {beam}")
    limits = Limits(args.max_request_sents, args.max_chars, args.max_line_words)
    if args.workers is not None:
        translator.use_workers(args.workers)  # refused off the CPU
    # a config's decoding.workers off the CPU: one search, as `translate` does
    workers = translator.config.decoding.workers if args.device == "cpu" else 1
    processes = _decoding_processes(translator, workers, beam)
    app = create_app(translator, model_dirs, ServeSettings(beam, args.max_batch_sents, args.max_wait_ms, limits,
                                                           options, workers), log, checkpoint=checkpoint,
                     decode=processes, problem=processes and processes.problem)
    log(f"{len(model_dirs)} model(s) loaded in {time.perf_counter() - start:.1f} s; serving on "
        f"http://{args.host}:{args.port}")
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, access_log=False,
                                           log_level="info", lifespan="on"))
    # uvicorn finishes the in-flight requests on SIGTERM, then raises the signal again under the
    # handler it found at start; a handler of ours there lets the process exit 0 instead of dying.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run()
    except SystemExit:  # uvicorn's way to say it could not start (e.g. the port is taken), logged above
        raise CtxnmtError(f"could not serve on {args.host}:{args.port} (see the message above)") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if processes:
            processes.close()
    if not server.started:
        raise CtxnmtError(f"could not serve on {args.host}:{args.port} (see the message above)")
    return 0


def _decoding_processes(translator: Translator, workers: int, beam: int) -> DecodingProcesses | None:
    """With more than one worker, the processes that decode the batches, forked after one search
    so that they share the weights in the form the search uses (packed, or quantised for int8)."""
    if workers == 1:
        return None
    translator.use_workers(1)  # each process is one search
    decode = BatchDecoder(translator)
    decode(Batch(0, [Job(["."], beam)]))
    return DecodingProcesses(decode, workers)
