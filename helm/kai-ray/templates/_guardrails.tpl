{{/*
Guardrails for installing next to other schedulers (README "Running next to KAI").

Everything here reads the cluster through `lookup`, which answers nothing under `helm template` and
`helm install --dry-run` (no cluster): there every object counts as absent and no conflict is found.
*/}}

{{/* Whether the chart creates KAI's PriorityClasses: the value when set, else only in standalone mode. */}}
{{- define "kai-ray.createPriorityClasses" -}}
{{- $v := .Values.priorityClasses.create -}}
{{- if kindIs "invalid" $v -}}{{- $v = eq .Values.mode "standalone" -}}{{- end -}}
{{- if $v -}}true{{- end -}}
{{- end -}}

{{/* Whether the chart creates the default queues: the value when set, else only in standalone mode. */}}
{{- define "kai-ray.createDefaultQueues" -}}
{{- $v := .Values.defaultQueues.create -}}
{{- if kindIs "invalid" $v -}}{{- $v = eq .Values.mode "standalone" -}}{{- end -}}
{{- if $v -}}true{{- end -}}
{{- end -}}

{{/*
"true" when the cluster-scoped object (dict: root, apiVersion, kind, name) is absent or belongs to this release.
Helm refuses to adopt an object another installer created (KAI's PriorityClasses and default queues), so the
chart leaves such objects alone instead of failing the install; NOTES lists what it left.
*/}}
{{- define "kai-ray.ownsOrAbsent" -}}
{{- $root := .root -}}
{{- if not ($root.Capabilities.APIVersions.Has (printf "%s/%s" .apiVersion .kind)) -}}
true
{{- else -}}
{{- $obj := lookup .apiVersion .kind "" .name -}}
{{- if not $obj -}}
true
{{- else -}}
{{- $ann := default dict $obj.metadata.annotations -}}
{{- if and (eq (toString (index $ann "meta.helm.sh/release-name")) $root.Release.Name) (eq (toString (index $ann "meta.helm.sh/release-namespace")) $root.Release.Namespace) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Who else already serves .Values.schedulerName, one line each (empty: nobody found). Evidence:
- a KAI Scheduler `Config` (kai.scheduler/v1) whose spec.global.schedulerName (default kai-scheduler) is ours;
- a Deployment, StatefulSet or DaemonSet outside this release whose container runs with
  `--scheduler-name=<name>` or `--scheduler-name <name>` (KAI's scheduler, binder and podgrouper, another kai-ray,
  most secondary schedulers started with that flag).
*/}}
{{- define "kai-ray.schedulerNameUsers" -}}
{{- $root := . -}}
{{- $name := .Values.schedulerName -}}
{{- $found := list -}}
{{- if .Capabilities.APIVersions.Has "kai.scheduler/v1/Config" -}}
{{- range (default dict (lookup "kai.scheduler/v1" "Config" "" "")).items -}}
{{- if eq (dig "spec" "global" "schedulerName" "kai-scheduler" .) $name -}}
{{- $found = append $found (printf "KAI Scheduler Config %s (spec.global.schedulerName %s)" .metadata.name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $kind := list "Deployment" "StatefulSet" "DaemonSet" -}}
{{- range (default dict (lookup "apps/v1" $kind "" "")).items -}}
{{- $ann := default dict .metadata.annotations -}}
{{- $ours := and (eq (toString (index $ann "meta.helm.sh/release-name")) $root.Release.Name) (eq (toString (index $ann "meta.helm.sh/release-namespace")) $root.Release.Namespace) -}}
{{- if not $ours -}}
{{- $obj := . -}}
{{- range $c := (dig "spec" "template" "spec" "containers" list .) -}}
{{- $argv := concat (default list $c.command) (default list $c.args) -}}
{{- range $i, $a := $argv -}}
{{- $next := "" -}}
{{- if lt (add1 $i) (len $argv) -}}{{- $next = toString (index $argv (add1 $i)) -}}{{- end -}}
{{- if or (eq (toString $a) (printf "--scheduler-name=%s" $name)) (and (eq (toString $a) "--scheduler-name") (eq $next $name)) -}}
{{- $found = append $found (printf "%s %s/%s (container %s runs with --scheduler-name %s)" $kind $obj.metadata.namespace $obj.metadata.name $c.name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- uniq $found | join "\n" -}}
{{- end -}}
