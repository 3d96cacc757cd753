#!/usr/bin/env bash
# First deploy and upgrade of one stage, in the order that keeps the service consistent:
#
#   1. infra stack (database, proxy, queues, secrets, alarms, gateway service) — the gateway
#      keeps running its CURRENT image here;
#   2. secrets CloudFormation cannot generate (installation RSA key, ENCRYPTION_KEY), once;
#   3. build the Chalice project (infra/build.py: placeholders filled from the stack outputs,
#      Lambda-lean requirements, Chalice's deployment state restored from S3), package it
#      (chalice package) and add bytecode for the third-party modules (infra/precompile.py),
#      which also replaces Chalice's cached package so `chalice deploy` reuses that very zip;
#   4. migrations: the `migrate` function gets the NEW code and runs it (schema to head, admin
#      key seeded) BEFORE `chalice deploy` switches the API and workers (first deploy: right
#      after it, as nothing serves tenants yet);
#   5. chalice deploy; the state goes back to S3; API Gateway gets the envelope gateway
#      responses (unknown route -> 404 NotFound instead of API Gateway's 403);
#   6. the gateway rolls to the new image (ECS rolling deploy with circuit breaker).
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

current_gateway_image() {
  aws cloudformation describe-stacks --stack-name "$STACK" \
    --query "Stacks[0].Parameters[?ParameterKey=='GatewayImage'].ParameterValue" \
    --output text 2>/dev/null || true
}

deploy_infra() {  # $1: gateway image to run
  # shellcheck disable=SC2046  # one KEY=value override per line of the params file
  aws cloudformation deploy --stack-name "$STACK" --template-file "$INFRA_TEMPLATE" \
    --capabilities CAPABILITY_IAM --no-fail-on-empty-changeset \
    --parameter-overrides Stage="$STAGE" GatewayImage="$1" $(grep -Ev '^\s*(#|$)' "$PARAMS_FILE")
}

generate_secret_once() {  # $1: stack output naming the secret, $2: command printing the value
  local arn current
  arn="$(stack_output "$1")"
  current="$(aws secretsmanager get-secret-value --secret-id "$arn" --query SecretString --output text)"
  if [ "$current" = "PENDING-GENERATION" ]; then
    log "generating $1"
    aws secretsmanager put-secret-value --secret-id "$arn" --secret-string "$(eval "$2")" >/dev/null
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
PREVIOUS_IMAGE="$(current_gateway_image)"
FIRST_DEPLOY=false
if [ -z "$PREVIOUS_IMAGE" ] || [ "$PREVIOUS_IMAGE" = "None" ]; then
  PREVIOUS_IMAGE="$REPO:$TAG"
  FIRST_DEPLOY=true
fi
deploy_infra "$PREVIOUS_IMAGE"

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
  log "migrating with the new code before traffic switches"
  aws lambda update-function-code --function-name "email-service-$STAGE-migrate" \
    --zip-file "fileb://$BUILD/package/deployment.zip" >/dev/null
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
deploy_infra "$REPO:$TAG"

log "done: stage $STAGE runs $TAG"
echo "API:  $(stack_output PublicUrl)"
echo "SMTP: $(stack_output GatewayLoadBalancerDnsName) (ports 25, 465, 587)"
echo "Admin API key: aws secretsmanager get-secret-value --secret-id $(stack_output AdminApiKeySecretArn) --query SecretString --output text"
