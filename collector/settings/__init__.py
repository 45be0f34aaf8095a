"""runwatch.toml, all of it: the model (`config.DetectConfig`: rules, custom, advice, stop), its loader, the
`[advice]` section (`advice`), the `[stop]` section with the match of an alert against it (`stop`), and the
per-run resolver that reloads it on change (`thresholds`). Detection reads only its part
(`collector.detect.rule_settings.RuleSettings`) and never imports this package."""
