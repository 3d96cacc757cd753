#!/usr/bin/env bash
# First deploy and upgrade of one stage, in the order that keeps the service consistent:
#
#   1. infra stack (database, proxy, queues, secrets, alarms, gateway service) — the gateway
#      keeps running its CURRENT image here, connected as the database role that image
#      expects (GatewayDatabaseRole: the service's own role; the tables' owner for an image
#      from before the two roles);
#   2. secrets CloudFormation cannot generate (installation RSA key, ENCRYPTION_KEY), once;
#   3. build the Chalice project (infra/build.py: placeholders filled from the stack outputs,
#      Lambda-lean requirements, Chalice's deployment state restored from S3), package it
#      (chalice package) and add bytecode for the third-party modules (infra/precompile.py),
#      which also replaces Chalice's cached package so `chalice deploy` reuses that very zip;
#   4. migrations: the `migrate` function gets the NEW code and configuration and runs them
#      (schema to head as the tables' owner, the service's database role created or updated
#      and granted, admin key seeded) BEFORE `chalice deploy` switches the API and workers to
#      that role (first deploy: right after it, as nothing serves tenants yet);
#   5. chalice deploy; the state goes back to S3; API Gateway gets the envelope gateway
#      responses (unknown route -> 404 NotFound instead of API Gateway's 403);
#   6. the gateway rolls to the new image, connected as the service's role (ECS rolling
#      deploy with circuit breaker).
#
# Migrations must be expand-only (add columns/tables, never drop or rename in the same release):
# old code keeps serving while they run. Drop things a release later.
#
# Usage: STATE_BUCKET=my-bucket GATEWAY_IMAGE_REPO=<ecr repo uri> infra/deploy.sh prod
# Needs: aws CLI v2, docker, openssl, python3 with requirements-dev.txt installed (chalice).
# Parameters of the infra stack: infra/params-<stage>.env (KEY=value lines, see
# infra/params.example.env). The release tag defaults to the git commit.
#
# Rehearsal (`make rehearse`, infra/rehearsal/): the same script against a simulated AWS
# (AWS_ENDPOINT_URL). INFRA_TEMPLATE names the template to apply (default infra/template.yaml;
# the rehearsal applies the part of it the simulator can create) and REHEARSAL=1 leaves out
# the gateway image's build and push (no registry there; the rehearsal runs the gateway from
# the deployed code); BUILD_DIR keeps the build (project, package) where the rehearsal
# reads it. Nothing else changes.
set -euo pipefail

STAGE="${1:?usage: infra/deploy.sh dev|prod}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STACK="${STACK_NAME:-email-service-$STAGE}"
PARAMS_FILE="${PARAMS_FILE:-$ROOT/infra/params-$STAGE.env}"
STATE_BUCKET="${STATE_BUCKET:?set STATE_BUCKET: the S3 bucket that keeps the Chalice deployment state}"
REPO="${GATEWAY_IMAGE_REPO:?set GATEWAY_IMAGE_REPO: the ECR repository of the SMTP gateway image}"
TAG="${RELEASE_TAG:-$(git -C "$ROOT" rev-parse --short HEAD)}"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
INFRA_TEMPLATE="${INFRA_TEMPLATE:-$ROOT/infra/template.yaml}"
REHEARSAL="${REHEARSAL:-0}"
CHALICE="${CHALICE:-$(dirname "$PYTHON")/chalice}"
if [ -n "${BUILD_DIR:-}" ]; then  # kept: the rehearsal checks the deployed code against it
  BUILD="$BUILD_DIR"
  mkdir -p "$BUILD"
else
  BUILD="$(mktemp -d)"
  trap 'rm -rf "$BUILD"' EXIT
fi
log() { printf '\n==> %s\n' "$*"; }

stack_output() {
  aws cloudformation describe-stacks --stack-name "$STACK" \
    --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}

current_parameter() {  # $1: parameter of the infra stack; empty without a stack
  aws cloudformation describe-stacks --stack-name "$STACK" \
    --query "Stacks[0].Parameters[?ParameterKey=='$1'].ParameterValue" \
    --output text 2>/dev/null || true
}

deploy_infra() {  # $1: gateway image to run, $2: the database role it connects as
  # shellcheck disable=SC2046  # one KEY=value override per line of the params file
  aws cloudformation deploy --stack-name "$STACK" --template-file "$INFRA_TEMPLATE" \
    --capabilities CAPABILITY_IAM --no-fail-on-empty-changeset \
    --parameter-overrides Stage="$STAGE" GatewayImage="$1" GatewayDatabaseRole="$2" \
    $(grep -Ev '^\s*(#|$)' "$PARAMS_FILE")
}

migrate_environment() {  # the migrate function's environment in the package just built
  "$PYTHON" - "$BUILD/package/sam.json" <<'PY'
import json, sys
resources = json.load(open(sys.argv[1]))["Resources"]
function = next(r for r in resources.values() if r["Type"] == "AWS::Serverless::Function"
                and r["Properties"]["Handler"] == "app.migrate")
print(json.dumps({"Variables": function["Properties"]["Environment"]["Variables"]}))
PY
}

generate_secret_once() {  # $1: stack output naming the secret, $2: command printing the value
  local arn current
  arn="$(stack_output "$1")"
  current="$(aws secretsmanager get-secret-value --secret-id "$arn" --query SecretString --output text)"
  if [ "$current" = "PENDING-GENERATION" ]; then
    log "generating $1"
    # --opt=value: a value that starts with '-' and holds no space (one in 64 random
    # url-safe keys) would otherwise be read by the CLI as an option of its own
    aws secretsmanager put-secret-value --secret-id "$arn" --secret-string="$(eval "$2")" >/dev/null
  fi
}

invoke_migrate() {
  local fn="email-service-$STAGE-migrate" out="$BUILD/migrate.json" error
  error="$(aws lambda invoke --function-name "$fn" --cli-read-timeout 320 \
    --query FunctionError --output text "$out")"
  cat "$out"; echo
  if [ "$error" != "None" ] && [ -n "$error" ]; then
    echo "migration failed; nothing was switched over" >&2
    exit 1
  fi
}

if [ "$REHEARSAL" = 1 ]; then
  log "rehearsal: the gateway image $REPO:$TAG is neither built nor pushed (no registry)"
else
  log "building and pushing the gateway image $REPO:$TAG"
  docker build -f "$ROOT/smtp-gateway/Dockerfile" -t "$REPO:$TAG" "$ROOT"
  docker push "$REPO:$TAG"
fi

log "infra stack $STACK (the gateway keeps its current image)"
PREVIOUS_IMAGE="$(current_parameter GatewayImage)"
PREVIOUS_ROLE="$(current_parameter GatewayDatabaseRole)"
FIRST_DEPLOY=false
if [ -z "$PREVIOUS_IMAGE" ] || [ "$PREVIOUS_IMAGE" = "None" ]; then
  PREVIOUS_IMAGE="$REPO:$TAG"
  PREVIOUS_ROLE=service
  FIRST_DEPLOY=true
elif [ -z "$PREVIOUS_ROLE" ] || [ "$PREVIOUS_ROLE" = "None" ]; then
  PREVIOUS_ROLE=owner  # a stack from before the two roles: its image connects as the owner
fi
deploy_infra "$PREVIOUS_IMAGE" "$PREVIOUS_ROLE"

generate_secret_once SigningKeySecretArn \
  "openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 2>/dev/null"
generate_secret_once EncryptionKeySecretArn \
  "openssl rand -base64 32 | tr '+/' '-_'"

log "building the Chalice project"
mkdir -p "$BUILD/deployed"
aws s3 sync "s3://$STATE_BUCKET/email-service/$STAGE/deployed/" "$BUILD/deployed/" --only-show-errors
"$PYTHON" "$ROOT/infra/build.py" "$BUILD/project" --stack "$STACK" --deployed "$BUILD/deployed"
(cd "$BUILD/project" && "$CHALICE" package --stage "$STAGE" "$BUILD/package" >/dev/null)
"$PYTHON" "$ROOT/infra/precompile.py" --project "$BUILD/project" "$BUILD/package/deployment.zip"

if [ "$FIRST_DEPLOY" = false ] && aws lambda get-function --function-name "email-service-$STAGE-migrate" >/dev/null 2>&1; then
  log "migrating with the new code and configuration before traffic switches"
  aws lambda update-function-code --function-name "email-service-$STAGE-migrate" \
    --zip-file "fileb://$BUILD/package/deployment.zip" >/dev/null
  aws lambda wait function-updated --function-name "email-service-$STAGE-migrate"
  # Its configuration too: the migrate step reads the database roles from it (on the deploy
  # that introduces the two roles, the secret's resource policy lets it read the service's).
  migrate_environment >"$BUILD/migrate-environment.json"
  aws lambda update-function-configuration --function-name "email-service-$STAGE-migrate" \
    --environment "file://$BUILD/migrate-environment.json" >/dev/null
  aws lambda wait function-updated --function-name "email-service-$STAGE-migrate"
  invoke_migrate
  MIGRATED=true
else
  MIGRATED=false
fi

log "chalice deploy --stage $STAGE (the precompiled package)"
(cd "$BUILD/project" && "$CHALICE" deploy --stage "$STAGE" | tee "$BUILD/deploy.log")
grep -q "Reusing existing deployment package" "$BUILD/deploy.log" ||
  echo "warning: chalice deploy built its own package (no third-party bytecode)" >&2
aws s3 sync "$BUILD/project/.chalice/deployed/" "s3://$STATE_BUCKET/email-service/$STAGE/deployed/" --only-show-errors

if [ "$MIGRATED" = false ]; then
  log "first deploy: migrating now"
  invoke_migrate
fi

log "API Gateway: envelope answers for unknown routes, throttling and oversized bodies"
"$PYTHON" "$ROOT/infra/gateway_responses.py" "$BUILD/project/.chalice/deployed/$STAGE.json"

log "rolling the SMTP gateway to $REPO:$TAG"
deploy_infra "$REPO:$TAG" service

log "done: stage $STAGE runs $TAG"
echo "API:  $(stack_output PublicUrl)"
echo "SMTP: $(stack_output GatewayLoadBalancerDnsName) (ports 25, 465, 587)"
echo "Admin API key: aws secretsmanager get-secret-value --secret-id $(stack_output AdminApiKeySecretArn) --query SecretString --output text"
echo "DNS records to publish (docs/deploying.md, first deploy step 3; a domain's check reports"
echo "the return path's SPF as return_path_spf):"
for output in ReturnPathSpfRecord SpfIncludeRecord; do
  record="$(stack_output "$output")"
  if [ -n "$record" ] && [ "$record" != None ]; then echo "  $record"; fi
done
