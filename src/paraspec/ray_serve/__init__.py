"""paraspec on Ray Serve: N engine replicas behind `paraspec serve`'s own OpenAI app, with
prefix-affinity routing and a replicated drafting memory (the `paraspec[ray]` extra; the only
package of paraspec that imports Ray).

    options.py      deployment sizes from config.json (num_cpus, max_ongoing_requests, autoscaling)
    deployments.py  ParaspecEngine (one engine a replica) and OpenAIIngress (the same FastAPI app)
    client.py       ServeEngineClient: the app's EngineClient over a Serve handle; /metrics of all
    router.py       TriePrefixRouter: rendezvous hash of the first K prompt tokens, owner first
    trie_hub.py     TrieHub (the merged memory, a detached actor) and the replicas' delta recorder
    trie_sync.py    a replica's bootstrap, push and pull
    launch.py       build_app (serve run / serve deploy / KubeRay) and `paraspec serve --ray`

    serve run paraspec.ray_serve:build_app config=config.json replicas=2
"""

__all__ = ["build_app"]


def __getattr__(name: str):
    # Ray loads on first use: options.py and trie_hub.py stay importable (and testable) without it
    if name == "build_app":
        from .launch import build_app

        return build_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
