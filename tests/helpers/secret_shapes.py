"""Every secret shape preflight must never print, each under an innocuous variable name.

Shared by the unit tests (tests/lib/test_secrets.py), the fuzz test over the detector
and the real multi-rank run (tests/checks/test_secrets_multirank.py). `marker` is the part
that must never appear in any output; `value` is the whole variable.
"""

from __future__ import annotations


def shapes(rank: int = 0) -> dict[str, tuple[str, str]]:
    """name -> (value, marker): the shapes of issue 17 plus the older ones, distinct per rank."""
    r = rank
    return {
        # issue 17: shapes that leaked
        "BACKUP_TARGET": (f"postgres://trainer:pf3sl/ash{r}word@db.internal:5432/runs", f"pf3sl/ash{r}word"),
        "PG_CONNINFO": (f"host=db.internal port=5432 user=trainer password=pf3libpq{r}pw dbname=runs",
                        f"pf3libpq{r}pw"),
        "REPORTING_DB": (f"mysql://db.internal/runs?user=trainer&password=pf3query{r}pw", f"pf3query{r}pw"),
        "NOTIFY_URL": (f"https://hooks.slack.com/services/T0PF3SLACK/B0PF3HOOK/pf3slackhook{r}abcdefgh",
                       f"pf3slackhook{r}abcdefgh"),
        "CI_REGISTRY_THING": (f"glpat-pf3GitLab{r}xxxxxxxxxxxxx", f"pf3GitLab{r}xxxxxxxxxxxxx"),
        "MAPS_CLIENT": (f"AIzaSyPf3GoogleMaps{r}" + "x" * (35 - len(f"SyPf3GoogleMaps{r}")),
                        f"Pf3GoogleMaps{r}"),
        # older shapes, under innocuous names too
        "UPSTREAM": (f"https://u:pf3basic{r}@example.org/x", f"pf3basic{r}"),
        "MODEL_HUB": (f"hf_pf3HuggingFaceHub{r}xxxxxxxxxxxx", f"pf3HuggingFaceHub{r}"),
        "GH_THING": (f"ghp_pf3GitHub{r}" + "y" * 30, f"pf3GitHub{r}"),
        "AWS_ID_THING": (f"AKIAPF3AWSKEY{r}ABCDEF"[:20], f"AKIAPF3AWSKEY{r}ABCDEF"[:20]),
        "BEARER": (f"eyJhbGciOiJIUzI1NiJ9.eyJwZjMiOiJqd3Qi{r}fQ.c2lnbmF0dXJl", f"eyJwZjMiOiJqd3Qi{r}fQ"),
        "OPENAI_THING": (f"sk-pf3OpenAi{r}" + "z" * 24, f"pf3OpenAi{r}"),
        "SLACK_BOT": (f"xoxb-1234-5678-pf3slackbot{r}", f"pf3slackbot{r}"),
        "TLS_MATERIAL": (f"-----BEGIN OPENSSH PRIVATE KEY-----\npf3pem{r}\n-----END OPENSSH PRIVATE KEY-----",
                         f"pf3pem{r}"),
        "NPMRC_LINE": (f"//registry.npmjs.org/:_authToken=npm_pf3npm{r}xxxxxxxxxxxxxxxxxxxx", f"npm_pf3npm{r}"),
        "ODBC": (f"Driver=x;Server=db;Uid=trainer;Pwd=pf3odbc{r}pw;", f"pf3odbc{r}pw"),
    }
