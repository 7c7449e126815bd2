/* test_config_errors.c - unit tests for the YAML configuration
 * (src/config/): the error of each bad file, one line at FILE:LINE:COL;
 * broker URLs and node lists. */
#include "config_fixture.h"

#include <errno.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "taskmill.h"

/* ------------------------------------------------------------- errors */

struct bad {
    const char *yaml;
    const char *pos;
    const char *msg;
};

static const struct bad bad_configs[] = {
    /* YAML syntax */
    { "tasks: add: x\n", "1:11",
      "mapping values are not allowed in this context" },
    { "tasks:\n\tadd: {plugin: a.so}\n", "2:1",
      "found character that cannot start any token (while scanning for the "
      "next token at line 2, column 1); indent with spaces, not tabs" },
    { "tasks:\n  add:\n    plugin add.so\n    queue: q\n", "4:10",
      "mapping values are not allowed in this context; is a ':' missing on "
      "a line above" },
    { "pool: {}\nplugin_dir\ntasks: {}\n", "3:1",
      "could not find expected ':' (while scanning a simple key at line 2, "
      "column 1); is a ':' missing after a key?" },
    { "tasks: [a, b\n", "2:1", "did not find expected ',' or ']'" },
    { "tasks: *nope\n", "1:8", "found undefined alias" },
    { "tasks:\n  add: {plugin: \xff}\n", "2:17", "invalid leading UTF-8" },
    { "", "1:1", "the config is empty" },
    { "# nothing\n", "1:1", "the config is empty" },
    { TASK "---\n" TASK, "4:1", "only one YAML document is allowed" },
    /* shape */
    { "- a\n- b\n", "1:1", "expected a mapping at the top level, got a "
      "sequence" },
    { "tasks: 5\n", "1:8", "tasks: expected a mapping, got a scalar" },
    { "tasks:\n  - add\n", "2:3", "tasks: expected a mapping, got a "
      "sequence" },
    { "tasks:\n", "1:1", "tasks: missing value" },
    { "tasks: {}\n", "1:8", "tasks: expected at least one task" },
    { "pool: {kind: thread}\n", "1:1", "missing required key 'tasks'" },
    { "pool: [thread]\n" TASK, "1:7", "pool: expected a mapping, got a "
      "sequence" },
    { "log: info\n" TASK, "1:6", "log: expected a mapping, got a scalar" },
    { "broker: redis://x\n" TASK, "1:9", "broker: expected a mapping" },
    { "http: [1]\n" TASK, "1:7", "http: expected a mapping" },
    /* telemetry: */
    { "telemetry: [1]\n" TASK, "1:12", "telemetry: expected a mapping" },
    { "telemetry:\n  otlp_endpoint: ftp://x\n" TASK, "2:18",
      "telemetry.otlp_endpoint: expected an http:// or https:// URL" },
    { "telemetry:\n  otlp_endpoint: http:///v1\n" TASK, "2:18",
      "telemetry.otlp_endpoint: expected an http:// or https:// URL" },
    { "telemetry:\n  otlp_endpoint: http://h:4318/?a=1\n" TASK, "2:18",
      "telemetry.otlp_endpoint: expected an http:// or https:// URL" },
    { "telemetry:\n  sample_ratio: 1.01\n" TASK, "2:17",
      "telemetry.sample_ratio: expected a number from 0 to 1" },
    { "telemetry:\n  sample_ratio: -0.5\n" TASK, "2:17",
      "telemetry.sample_ratio: expected a number from 0 to 1" },
    { "telemetry:\n  sample_ratio: nan\n" TASK, "2:17",
      "telemetry.sample_ratio: expected a number from 0 to 1" },
    { "telemetry:\n  headers: [a]\n" TASK, "2:12",
      "telemetry.headers: expected a mapping" },
    { "telemetry:\n  headers: {'a b': x}\n" TASK, "2:13",
      "telemetry.headers: 'a b' is not a header name" },
    { "telemetry:\n  headers: {a: [x]}\n" TASK, "2:16",
      "telemetry.headers.a: expected a scalar value" },
    { "telemetry:\n  service_name: {a: 1}\n" TASK, "2:17",
      "telemetry.service_name: expected a scalar value" },
    { "telemetry:\n  endpoint: http://x\n" TASK, "2:3",
      "unknown key 'endpoint' in telemetry" },
    { "tasks:\n  add: plugin.so\n", "2:8", "tasks.add: expected a mapping, "
      "got a scalar" },
    { "tasks:\n  add:\n    plugin: [a.so]\n", "3:13", "tasks.add.plugin: "
      "expected a scalar value, got a sequence" },
    { "tasks:\n  add:\n    plugin: a.so\n    [x]: 1\n", "4:5",
      "expected a key name in tasks.add, got a sequence" },
    { "tasks:\n  [x]: {plugin: a.so}\n", "2:3", "tasks: expected a task "
      "name, got a sequence" },
    { "tasks:\n  add:\n    plugin: a.so\n    queue:\n", "4:5",
      "tasks.add.queue: missing value" },
    { "tasks:\n  add:\n    plugin: a.so\n    queue: \"\"\n", "4:12",
      "tasks.add.queue: must not be empty" },
    { "tasks:\n  add:\n    plugin:\n", "3:5", "tasks.add.plugin: missing "
      "value" },
    /* unknown and duplicate keys */
    { TASK "foo: 1\n", "4:1", "unknown key 'foo'; expected one of: broker, "
      "pool, plugin_dir, plugin_watch, instance, http, shutdown_timeout, "
      "log, tasks" },
    { "pool:\n  kind: thread\n  sise: 4\n" TASK, "3:3",
      "unknown key 'sise' in pool; expected one of: kind, size, "
      "max_tasks_per_child" },
    { "broker: { uri: redis://h }\n" TASK, "1:11",
      "unknown key 'uri' in broker; expected one of: url, password_file, "
      "tls, redis, amqp" },
    { "http: { port: 80 }\n" TASK, "1:9",
      "unknown key 'port' in http; expected one of: listen, token, "
      "allowed_hosts" },
    { "log: { level: info, colour: no }\n" TASK, "1:21",
      "unknown key 'colour' in log; expected one of: level, format" },
    { TASK "    prefech: 4\n", "4:5", "unknown key 'prefech' in tasks.add; "
      "expected one of: plugin, queue, group, prefetch, timeout, "
      "claim_idle, maxlen, on_error, max_retries, backoff, max_backoff, "
      "dead_letter, max_payload, max_priority, priority, config" },
    { "tasks:\n  add:\n    queue: a\n    plugin: a.so\n    queue: b\n",
      "5:5", "duplicate key 'queue' in tasks.add" },
    { "tasks:\n  a: {plugin: a.so}\ntasks:\n  b: {plugin: b.so}\n", "3:1",
      "duplicate key 'tasks'" },
    { "tasks:\n  a: {plugin: a.so}\n  a: {plugin: b.so}\n", "3:3",
      "duplicate key 'a' in tasks" },
    { "log: { level: info, level: debug }\n" TASK, "1:21",
      "duplicate key 'level' in log" },
    { TASK "    config: { a: 1, b: { c: 2, c: 3 } }\n", "4:32",
      "duplicate key 'c' in tasks.add.config.b" },
    /* required keys and names */
    { "tasks:\n  add:\n    queue: q\n", "2:3",
      "tasks.add: missing required key 'plugin'" },
    { "tasks:\n  add:\n", "2:3", "tasks.add: missing required key "
      "'plugin'" },
    { "tasks:\n  'a b': {plugin: a.so}\n", "2:3",
      "tasks: invalid task name 'a b'; use letters, digits, '_', '.' and "
      "'-'" },
    { "tasks:\n  add{x}: {plugin: a.so}\n", "2:3", "invalid task name" },
    { "tasks:\n  '': {plugin: a.so}\n", "2:3", "invalid task name ''" },
    /* integers */
    { TASK "    prefetch: abc\n", "4:15", "tasks.add.prefetch: expected an "
      "integer from 1 to 65535, got 'abc'" },
    { TASK "    prefetch: 0\n", "4:15", "expected an integer from 1 to "
      "65535, got '0'" },
    { TASK "    prefetch: 65536\n", "4:15", "from 1 to 65535, got '65536'" },
    { TASK "    prefetch: 16x\n", "4:15", "got '16x'" },
    { TASK "    prefetch: +16\n", "4:15", "got '+16'" },
    { TASK "    prefetch: 1.5\n", "4:15", "got '1.5'" },
    { "pool: { size: 0 }\n" TASK, "1:15", "pool.size: expected an integer "
      "from 1 to 1024, got '0'" },
    { "pool: { size: 1025 }\n" TASK, "1:15", "pool.size: expected an "
      "integer from 1 to 1024" },
    { "pool: { max_tasks_per_child: -1 }\n" TASK, "1:30",
      "pool.max_tasks_per_child: expected an integer >= 0, got '-1'" },
    { "pool: { max_tasks_per_child: 99999999999 }\n" TASK, "1:30",
      "pool.max_tasks_per_child: expected an integer >= 0" },
    { TASK "    max_retries: -2\n", "4:18", "tasks.add.max_retries: "
      "expected an integer >= -1, got '-2'" },
    { TASK "    max_retries: 99999999999999999999\n", "4:18",
      "tasks.add.max_retries: expected an integer >= -1" },
    { TASK "    maxlen: -1\n", "4:13", "tasks.add.maxlen: expected an "
      "integer >= 0, got '-1'" },
    { TASK "    maxlen: 1e6\n", "4:13", "tasks.add.maxlen: expected an "
      "integer >= 0, got '1e6'" },
    /* durations */
    { TASK "    timeout: 30\n", "4:14", "tasks.add.timeout: expected a "
      "duration like 250ms, 30s, 5m, 1h, got '30' (a bare number is "
      "ambiguous" },
    { TASK "    timeout: -1s\n", "4:14", "tasks.add.timeout: expected a "
      "duration like 250ms, 30s, 5m, 1h, got '-1s'" },
    { TASK "    timeout: 30 s\n", "4:14", "got '30 s'" },
    { TASK "    timeout: 1d\n", "4:14", "got '1d'" },
    { TASK "    claim_idle: 0\n", "4:17", "tasks.add.claim_idle: must be "
      "greater than 0, got '0'" },
    { TASK "    claim_idle: 0ms\n", "4:17", "tasks.add.claim_idle: must be "
      "greater than 0" },
    { TASK "    backoff: 0s\n", "4:14", "tasks.add.backoff: must be greater "
      "than 0" },
    { TASK "    backoff: 10s\n    max_backoff: 5s\n", "5:18",
      "tasks.add.max_backoff: must be at least backoff (10s), got 5s" },
    { TASK "    max_backoff: 500ms\n", "4:18", "tasks.add.max_backoff: "
      "must be at least backoff (1s), got 500ms" },
    { TASK "    circuit_max_cool_off: 1s\n", "4:27",
      "tasks.add.circuit_max_cool_off: must be at least circuit_cool_off "
      "(5s), got 1s" },
    { TASK "    circuit_cool_off: 0s\n", "4:23", "tasks.add.circuit_cool_off: "
      "must be greater than 0" },
    { TASK "    circuit_failures: -1\n", "4:23", "tasks.add.circuit_failures: "
      "expected an integer" },
    { "shutdown_timeout: soon\n" TASK, "1:19", "shutdown_timeout: expected "
      "a duration like 250ms, 30s, 5m, 1h, got 'soon'" },
    { "shutdown_timeout: 99999999999999h\n" TASK, "1:19",
      "shutdown_timeout: duration '99999999999999h' is too long" },
    { "shutdown_timeout: 300000000h\n" TASK, "1:19",
      "shutdown_timeout: duration '300000000h' is too long" },
    /* sizes */
    { TASK "    max_payload: 1MB\n", "4:18", "tasks.add.max_payload: "
      "expected a size like 512B, 64KiB, 1MiB, got '1MB'" },
    { TASK "    max_payload: 0\n", "4:18", "tasks.add.max_payload: expected "
      "a size from 1B to 512MiB, got '0'" },
    { TASK "    max_payload: 513MiB\n", "4:18", "expected a size from 1B "
      "to 512MiB, got '513MiB'" },
    { TASK "    max_payload: -1\n", "4:18", "expected a size like" },
    /* enums and booleans */
    { "pool:\n  kind: forks\n" TASK, "2:9", "pool.kind: unknown value "
      "'forks'; expected one of: thread, fork" },
    { TASK "    on_error: retry\n", "4:15", "tasks.add.on_error: unknown "
      "value 'retry'; expected one of: requeue, reject" },
    { "log: { level: verbose, format: text }\n" TASK, "1:15",
      "log.level: unknown value 'verbose'; expected one of: error, "
      "warning, info, debug" },
    { "log: { format: xml }\n" TASK, "1:16", "log.format: unknown value "
      "'xml'; expected one of: text, json" },
    { "plugin_watch: maybe\n" TASK, "1:15", "plugin_watch: expected true "
      "or false, got 'maybe'" },
    { "plugin_watch: [true]\n" TASK, "1:15", "plugin_watch: expected a "
      "scalar value, got a sequence" },
    /* environment */
    { "instance: ${TM_TEST_UNSET}\n" TASK, "1:11",
      "instance: environment variable 'TM_TEST_UNSET' is not set (use "
      "${TM_TEST_UNSET:-default} for a default)" },
    { TASK "    queue: 'q-${TM_TEST_UNSET:-${TM_TEST_UNSET2}}'\n", "4:12",
      "environment variable 'TM_TEST_UNSET2' is not set" },
    { TASK "    config: { deep: [ x, \"${TM_TEST_UNSET}\" ] }\n", "4:26",
      "tasks.add.config.deep[1]: environment variable 'TM_TEST_UNSET' is "
      "not set" },
    { "instance: ${1X}\n" TASK, "1:11", "instance: invalid variable "
      "reference '${1X}'; expected ${NAME} or ${NAME:-default}" },
    { "instance: abc${HOME\n" TASK, "1:11", "instance: unterminated "
      "'${HOME'" },
    { "instance: ${HOME:=x}\n" TASK, "1:11", "invalid variable reference" },
    /* password_file */
    { "broker:\n  password_file: no-such-secret\n" TASK, "2:18",
      "broker.password_file: cannot read '" },
    { "broker:\n  password_file: no-such-secret\n" TASK, "2:18",
      "/no-such-secret': No such file or directory" },
    /* priorities */
    { TASK "    priority: 1\n", "4:5", "tasks.add.priority: priorities are "
      "not supported on Redis streams (RabbitMQ only)" },
    { TASK "    max_priority: 4\n    priority: 1\n"
      "broker: { url: 'redis://h' }\n", "4:5", "tasks.add.max_priority: "
      "priorities are not supported on Redis streams (RabbitMQ only)" },
    { "tasks:\n  add:\n    priority: 1\n    plugin: a.so\n"
      "    max_priority: 4\n", "3:5", "tasks.add.priority: priorities are "
      "not supported on Redis streams" },
    { "broker: {url: amqp://h}\n" TASK "    max_priority: 3\n"
      "    priority: 4\n", "6:15", "tasks.add.priority: 4 is above "
      "max_priority (3); expected an integer from 0 to 3" },
    { TASK "    priority: 2\nbroker: {url: amqp://h}\n", "4:15",
      "tasks.add.priority: 2 is above max_priority (0)" },
    { "broker: {url: amqp://h}\n" TASK "    max_priority: 256\n", "5:19",
      "tasks.add.max_priority: expected an integer from 0 to 255, got "
      "'256'" },
    { "broker: {url: amqp://h}\n" TASK "    priority: -1\n", "5:15",
      "tasks.add.priority: expected an integer from 0 to 255, got '-1'" },
    /* deduplication needs a shared store: Redis only */
    { "broker: {url: amqp://h}\n" TASK "    dedup_ttl: 1m\n", "5:5",
      "tasks.add.dedup_ttl: deduplication needs a store shared by every "
      "daemon of the queue, which RabbitMQ does not have" },
    { TASK "    dedup_ttl: 1m\nbroker: {url: amqp://h}\n", "4:5",
      "tasks.add.dedup_ttl: deduplication needs a store shared" },
    /* broker URL */
    { "broker:\n  url: http://x\n" TASK, "2:8", "broker.url: unknown scheme "
      "'http'; expected one of: redis, rediss, amqp, amqps" },
    /* broker section: lists of nodes, tls, redis, amqp */
    { "broker:\n  url: [amqp://a, redis://b]\n" TASK, "2:19",
      "broker.url[1]: scheme redis:// differs from the first node's "
      "amqp://" },
    { "broker:\n  url: [amqp://a, amqps://b]\n" TASK, "2:19",
      "broker.url[1]: scheme amqps:// differs" },
    { "broker:\n  url: [amqp://a, 'x:1']\n" TASK, "2:19",
      "broker.url[1]: expected a URL like" },
    { "broker:\n  url: [amqp://a, '']\n" TASK, "2:19",
      "broker.url[1]: must not be empty" },
    { "broker:\n  url: []\n" TASK, "2:8", "broker.url: an empty list" },
    { "broker:\n  url: [redis://a, redis://b]\n" TASK, "2:8",
      "broker.url: 2 URLs with broker.redis.mode: standalone (one server); "
      "use mode: sentinel (the URLs are the sentinels) or cluster" },
    { "broker:\n  url: amqps://h\n  tls:\n    cert_file: c.pem\n" TASK,
      "4:5", "broker.tls.cert_file: given without broker.tls.key_file" },
    { "broker:\n  url: amqps://h\n  tls: {key_file: k.pem}\n" TASK,
      "3:9", "broker.tls.key_file: given without broker.tls.cert_file" },
    { "broker:\n  url: amqp://h\n  tls: {verify: false}\n" TASK, "3:3",
      "broker.tls: TLS settings with a plain amqp:// URL; use amqps://" },
    { "broker:\n  tls: {ca_file: ca.pem}\n" TASK, "2:3",
      "broker.tls: TLS settings with a plain redis:// URL; use rediss://" },
    { "broker:\n  url: amqps://h\n  tls: {verify: maybe}\n" TASK, "3:17",
      "broker.tls.verify: expected true or false" },
    { "broker:\n  url: amqps://h\n  tls: {colour: red}\n" TASK, "3:9",
      "unknown key 'colour' in broker.tls; expected one of: ca_file, "
      "cert_file, key_file, server_name, verify" },
    { "broker:\n  url: redis://h\n  redis: {mode: sentinel}\n" TASK,
      "3:17", "broker.redis.mode: sentinel needs broker.redis.master" },
    { "broker:\n  url: redis://h\n  redis: {master: m}\n" TASK, "3:11",
      "broker.redis.master: only used with broker.redis.mode: sentinel" },
    { "broker:\n  url: redis://h\n  redis: {mode: ring}\n" TASK, "3:17",
      "broker.redis.mode: unknown value 'ring'; expected one of: "
      "standalone, sentinel, cluster" },
    { "broker:\n  url: amqp://h\n  redis: {mode: cluster}\n" TASK, "3:3",
      "broker.redis: Redis settings with an amqp:// URL" },
    { "broker:\n  url: redis://h\n  amqp: {queue_type: quorum}\n" TASK,
      "3:3", "broker.amqp: RabbitMQ settings with a redis:// URL" },
    { "broker:\n  url: amqp://h\n  amqp: {queue_type: stream}\n" TASK,
      "3:22", "broker.amqp.queue_type: unknown value 'stream'; expected one "
      "of: classic, quorum" },
    { "broker:\n  url: amqp://h\n  amqp: {heartbeat: 1500ms}\n" TASK,
      "3:21", "broker.amqp.heartbeat: expected whole seconds from 0 (off) "
      "to 65535s, got '1500ms'" },
    { "broker:\n  url: amqp://h\n  amqp: {heartbeat: 19h}\n" TASK,
      "3:21", "broker.amqp.heartbeat: expected whole seconds" },
    { "broker:\n  url: amqp://h\n  amqp: {queue_type: quorum}\n" TASK
      "    max_priority: 3\n", "7:5", "tasks.add.max_priority: priorities "
      "are not supported on quorum queues (broker.amqp.queue_type: quorum)" },
    { TASK "    max_priority: 3\nbroker:\n  url: amqp://h\n  amqp: "
      "{queue_type: quorum}\n", "4:5", "tasks.add.max_priority: priorities "
      "are not supported on quorum queues" },
    { "broker:\n  url: redis://h:99999/0\n" TASK, "2:8", "broker.url: "
      "invalid port '99999'; expected 1 to 65535" },
    { "broker:\n  url: redis://h/x\n" TASK, "2:8", "broker.url: invalid "
      "database number 'x'" },
    { "broker:\n  url: localhost:6379\n" TASK, "2:8", "broker.url: "
      "expected a URL like redis://host:6379/0" },
    { "broker:\n  url: ''\n" TASK, "2:8", "broker.url: must not be empty" },
    /* other values */
    { "http:\n  listen: 9999\n" TASK, "2:11", "http.listen: expected "
      "host:port like 127.0.0.1:9999, got '9999'" },
    { "http:\n  listen: 'localhost:http'\n" TASK, "2:11",
      "http.listen: expected host:port" },
    { "plugin_dir: ''\n" TASK, "1:13", "plugin_dir: must not be empty" },
    { TASK "    config: [1, 2]\n", "4:13", "tasks.add.config: expected a "
      "mapping, got a sequence" },
    { TASK "    config: '{\"a\": 1}'\n", "4:13", "tasks.add.config: "
      "expected a mapping, got a scalar" },
    { TASK "    queue: q\n    dead_letter: q\n", "5:18",
      "tasks.add.dead_letter: must differ from the queue 'q'" },
    { TASK "    queue: \"a\\0b\"\n", "4:12", "tasks.add.queue: contains a "
      "NUL character" },
    { TASK "    config: &a { x: *a }\n", "4:13", ".x.x.x.x: nested more "
      "than 64 levels deep" },
    /* schedules: */
    { TASK SCHED "    cron: '0 24 * * *'\n", "7:14",
      "schedules.nightly.cron: field 2 (hour) at column 3: expected 0-23, "
      "got '24'" },
    { TASK SCHED "    cron: 0 0 30 2 *\n", "7:15", "schedules.nightly.cron: "
      "field 3 (day-of-month) at column 5: no month of the spec has such a "
      "day: it never fires" },
    { TASK SCHED "    cron: \"*/5 * * * mon#\"\n", "7:25",
      "unexpected character '#'" },
    { TASK SCHED "    cron: '* * * *'\n", "7:19", "schedules.nightly.cron: "
      "4 fields, expected five" },
    { TASK SCHED "    cron: '0 3 * * *'\n    every: 30s\n", "8:5",
      "schedules.nightly.every: give either cron or every, not both" },
    { TASK SCHED, "5:3", "schedules.nightly: missing 'cron' or 'every'" },
    { TASK "schedules:\n  nightly:\n    every: 1m\n", "5:3",
      "schedules.nightly: missing required key 'task'" },
    { TASK "schedules:\n  nightly:\n    task: nope\n    every: 1m\n", "6:11",
      "schedules.nightly.task: unknown task 'nope'; expected a task of this "
      "file: add" },
    { TASK SCHED "    every: 1m\n    timezone: Europe/Berlin\n", "8:5",
      "schedules.nightly.timezone: applies to cron only; every slots are "
      "aligned to the Unix epoch (UTC)" },
    { TASK SCHED "    cron: '0 3 * * *'\n    timezone: Mars/Base\n", "8:15",
      "schedules.nightly.timezone: unknown time zone 'Mars/Base'" },
    { TASK SCHED "    cron: '0 3 * * *'\n    timezone: ../../etc/passwd\n",
      "8:15", "schedules.nightly.timezone: invalid time zone name" },
    { TASK SCHED "    every: 1m\n    tz: UTC\n", "8:5", "unknown key 'tz' in "
      "schedules.nightly; expected one of: task, cron, every, timezone, "
      "body, catch_up" },
    { TASK "schedules:\n  'bad name':\n    task: add\n    every: 1m\n",
      "5:3", "schedules: invalid schedule name 'bad name'; use letters, "
      "digits, '_', '.' and '-'" },
    { TASK SCHED "    every: 1m\n    catch_up: always\n", "8:15",
      "schedules.nightly.catch_up: unknown value 'always'; expected one of: "
      "skip, once" },
    { TASK SCHED "    every: 0\n", "7:12", "schedules.nightly.every: must be "
      "greater than 0" },
    { TASK SCHED "    every: 5 minutes\n", "7:12", "schedules.nightly.every: "
      "expected a duration like 250ms, 30s, 5m, 1h" },
    { TASK SCHED "    every: 1m\n    body: [1]\n", "8:11",
      "schedules.nightly.body: expected a mapping, got a sequence" },
    { TASK "schedules: [a]\n", "4:12", "schedules: expected a mapping, got "
      "a sequence" },
    { TASK "schedules:\n  nightly:\n", "5:3", "schedules.nightly: missing "
      "value" },
    { TASK "schedules:\n  a: {task: add, every: 1m}\n"
      "  a: {task: add, every: 2m}\n", "6:3",
      "duplicate key 'a' in schedules" },
};

START_TEST(test_bad_config)
{
    const struct bad *b = &bad_configs[_i];
    unsetenv("TM_TEST_UNSET");
    unsetenv("TM_TEST_UNSET2");
    expect_error(b->yaml, b->pos, b->msg);
}
END_TEST

/* A list of AMQP nodes: each parsed, url a copy of the first, the
 * password file's secret on every node; broker.tls and broker.amqp. */
START_TEST(test_broker_nodes)
{
    char err[512] = "";
    char expect[PATH_MAX];
    write_file("secret", "s3\n");
    struct tm_cfg *cfg = load_text(
        "broker:\n"
        "  url: [amqps://u@rmq-0:5671/, 'amqps://u@rmq-1:5681/v',\n"
        "        amqps://u@rmq-2]\n"
        "  password_file: secret\n"
        "  tls:\n"
        "    ca_file: ca.pem\n"
        "    cert_file: /etc/c.pem\n"
        "    key_file: c.key\n"
        "    server_name: rmq.internal\n"
        "    verify: false\n"
        "  amqp: { queue_type: quorum, heartbeat: 5s }\n" TASK,
        err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 3);
    ck_assert_str_eq(cfg->broker_url, "amqps://u@rmq-0:5671/, "
                     "amqps://u@rmq-1:5681/v, amqps://u@rmq-2");
    ck_assert_str_eq(cfg->url.host, "rmq-0");
    ck_assert_str_eq(cfg->url.password, "s3");
    ck_assert_str_eq(cfg->nodes[0].host, "rmq-0");
    ck_assert_str_eq(cfg->nodes[1].host, "rmq-1");
    ck_assert_int_eq(cfg->nodes[1].port, 5681);
    ck_assert_str_eq(cfg->nodes[1].vhost, "v");
    ck_assert_str_eq(cfg->nodes[2].host, "rmq-2");
    ck_assert_int_eq(cfg->nodes[2].port, 5671);
    for (size_t i = 0; i < cfg->nnodes; i++) {
        ck_assert(cfg->nodes[i].tls);
        ck_assert_str_eq(cfg->nodes[i].user, "u");
        ck_assert_str_eq(cfg->nodes[i].password, "s3");
    }
    ck_assert(cfg->has_tls);
    tm_snprintf(expect, sizeof expect, "%s/ca.pem", g_dir);
    ck_assert_str_eq(cfg->tls.ca_file, expect);
    ck_assert_str_eq(cfg->tls.cert_file, "/etc/c.pem");
    tm_snprintf(expect, sizeof expect, "%s/c.key", g_dir);
    ck_assert_str_eq(cfg->tls.key_file, expect);
    ck_assert_str_eq(cfg->tls.server_name, "rmq.internal");
    ck_assert(!cfg->tls.verify);
    ck_assert_int_eq(cfg->amqp_queue_type, TM_AMQP_QUORUM);
    ck_assert_int_eq(cfg->amqp_heartbeat_ms, 5000);
    tm_cfg_free(cfg);

    /* defaults: one node, classic, 30 s heartbeat, verify on */
    cfg = load_text("broker: { url: amqp://h }\n" TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 1);
    ck_assert_str_eq(cfg->nodes[0].redacted, cfg->url.redacted);
    ck_assert(!cfg->has_tls);
    ck_assert(cfg->tls.verify);
    ck_assert_int_eq(cfg->amqp_queue_type, TM_AMQP_CLASSIC);
    ck_assert_int_eq(cfg->amqp_heartbeat_ms, 30000);
    ck_assert_int_eq(cfg->redis_mode, TM_REDIS_STANDALONE);
    tm_cfg_free(cfg);

    /* no broker key at all: the default URL is the one node */
    cfg = load_text(TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 1);
    ck_assert_str_eq(cfg->nodes[0].host, "127.0.0.1");
    tm_cfg_free(cfg);

    /* heartbeat 0 turns heartbeats off */
    cfg = load_text("broker: { url: amqp://h, amqp: { heartbeat: 0 } }\n"
                    TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->amqp_heartbeat_ms, 0);
    tm_cfg_free(cfg);
}
END_TEST

/* Redis: rediss:// is accepted by the configuration (the adapter decides
 * whether it can connect), sentinel and cluster take lists. */
START_TEST(test_broker_redis_modes)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text("broker: { url: 'rediss://h:7000/2' }\n"
                                   TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->url.kind, TM_BROKER_REDIS);
    ck_assert(cfg->url.tls);
    ck_assert_str_eq(cfg->url.scheme, "rediss");
    ck_assert_str_eq(cfg->url.redacted, "rediss://h:7000/2");
    tm_cfg_free(cfg);

    cfg = load_text("broker:\n"
                    "  url: [redis://s1:26379, redis://s2:26379]\n"
                    "  redis: { mode: sentinel, master: mymaster }\n" TASK,
                    err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->redis_mode, TM_REDIS_SENTINEL);
    ck_assert_str_eq(cfg->redis_master, "mymaster");
    ck_assert_uint_eq(cfg->nnodes, 2);
    ck_assert_int_eq(cfg->nodes[1].port, 26379);
    tm_cfg_free(cfg);

    cfg = load_text("broker:\n"
                    "  url:\n    - redis://c1:7000\n    - redis://c2:7000\n"
                    "  redis: { mode: cluster }\n"
                    "tasks:\n  add: { plugin: add.so, queue: '{add}' }\n",
                    err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_int_eq(cfg->redis_mode, TM_REDIS_CLUSTER);
    ck_assert_ptr_null(cfg->redis_master);
    ck_assert_uint_eq(cfg->nnodes, 2);
    tm_cfg_free(cfg);

    /* cluster: a task whose keys do not share a slot gets a hash tag
     * proposed */
    cfg = load_text("broker:\n"
                    "  url: [redis://c1:7000, redis://c2:7000]\n"
                    "  redis: { mode: cluster }\n" TASK, err, sizeof err);
    ck_assert_ptr_null(cfg);
    ck_assert_msg(strstr(err, "one hash slot") != NULL &&
                  strstr(err, "queue: '{taskmill.add}'") != NULL, "%s", err);

    /* cluster: database 0 only, said at the URL, without its password
     * (seven characters: not in the scratch directory's name, whose
     * random part is six) */
    cfg = load_text("broker:\n"
                    "  url: [redis://c1:7000, 'redis://:hunter2@c2:7000/3']\n"
                    "  redis: { mode: cluster }\n"
                    "tasks:\n  add: { plugin: add.so, queue: '{add}' }\n",
                    err, sizeof err);
    ck_assert_ptr_null(cfg);
    ck_assert_msg(strstr(err, ":2:8: broker.url: database 3 in "
                          "'redis://c2:7000/3'; a Redis Cluster has "
                          "database 0 only") != NULL &&
                  strstr(err, "hunter2") == NULL, "%s", err);

    /* a one-element list is a single node */
    cfg = load_text("broker: { url: [redis://h] }\n" TASK, err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    ck_assert_uint_eq(cfg->nnodes, 1);
    ck_assert_str_eq(cfg->broker_url, "redis://h");
    tm_cfg_free(cfg);
}
END_TEST

/* The error names the key, never a secret from the URL. */
START_TEST(test_url_error_hides_password)
{
    char err[512] = "";
    ck_assert_ptr_null(load_text("broker: { url: 'redis://u:top/secret@h' }"
                                 "\n" TASK, err, sizeof err));
    ck_assert_ptr_null(strstr(err, "secret"));
    ck_assert_ptr_nonnull(strstr(err, "broker.url: "));
    ck_assert_ptr_null(load_text("broker: { url: 'ftp://u:secret@h' }\n"
                                 TASK, err, sizeof err));
    ck_assert_ptr_null(strstr(err, "secret"));
}
END_TEST

/* Control characters in a key name never break the one-line error. */
START_TEST(test_error_one_line)
{
    expect_error(TASK "    \"bad\\nkey\": 1\n", "4:5", "unknown key 'bad?key'");
}
END_TEST

/* Alias bombs are bounded instead of expanded. */
START_TEST(test_alias_bomb)
{
    static const char yaml[] =
        TASK
        "    config:\n"
        "      a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        "      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
        "      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
        "      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n";
    char err[512] = "";
    ck_assert_ptr_null(load_text(yaml, err, sizeof err));
    ck_assert_msg(strstr(err, "more than 100000 values") != NULL, "%s", err);
}
END_TEST

/* A small alias is fine and converts to JSON twice. */
START_TEST(test_config_json_types)
{
    char err[512] = "";
    struct tm_cfg *cfg = load_text(
        TASK
        "    config:\n"
        "      base: &b { host: db, port: 5432 }\n"
        "      copy: *b\n"
        "      ints: [0, -7, +3, 007, 0x1f, 0o17, 9223372036854775807]\n"
        "      big: [99999999999999999999, -00012, -0, +0]\n"
        "      floats: [1.5, -2.5e3, .5]\n"
        "      words: [yes, no, on, True, FALSE, Null, ~, nan, .inf, 0x]\n"
        "      quoted: ['1', \"true\", 'null']\n"
        "      block: |\n"
        "        line one\n"
        "        line two\n"
        "      empty: {}\n"
        "      \"sp ace\": ''\n", err, sizeof err);
    ck_assert_msg(cfg != NULL, "%s", err);
    const char *j = cfg->tasks[0].config_json;
    ck_assert_str_eq(j,
        "{\"base\":{\"host\":\"db\",\"port\":5432},"
        "\"copy\":{\"host\":\"db\",\"port\":5432},"
        "\"ints\":[0,-7,3,7,31,15,9223372036854775807],"
        "\"big\":[99999999999999999999,-12,0,0],"
        "\"floats\":[1.5,-2500,0.5],"
        "\"words\":[\"yes\",\"no\",\"on\",true,false,null,null,\"nan\","
        "\".inf\",\"0x\"],"
        "\"quoted\":[\"1\",\"true\",\"null\"],"
        "\"block\":\"line one\\nline two\\n\","
        "\"empty\":{},"
        "\"sp ace\":\"\"}");
    cJSON *parsed = cJSON_Parse(j);
    ck_assert_ptr_nonnull(parsed);
    cJSON_Delete(parsed);
    tm_cfg_free(cfg);
}
END_TEST


/* --------------------------------------------------------------- main */

static Suite *config_errors_suite(void)
{
    Suite *s = suite_create("config_errors");
    TCase *tc = tcase_create("errors");
    tcase_add_loop_test(tc, test_bad_config, 0,
                        (int)(sizeof bad_configs / sizeof bad_configs[0]));
    tcase_add_test(tc, test_url_error_hides_password);
    tcase_add_test(tc, test_error_one_line);
    tcase_add_test(tc, test_alias_bomb);
    suite_add_tcase(s, tc);

    tc = tcase_create("brokers");
    tcase_add_test(tc, test_broker_nodes);
    tcase_add_test(tc, test_broker_redis_modes);
    tcase_add_test(tc, test_config_json_types);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return run_in_scratch_dir(config_errors_suite());
}
