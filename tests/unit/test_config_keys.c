/* test_config_keys.c - the table of config keys (src/config/keys.c):
 * every key the reader accepts says whether a reload applies it, and the
 * restart-only ones are those docs/operations.md lists. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "util/util.h"

#include "unit_main.h"

/* full_path writes SECTION.KEY (KEY at the top level) into buf. */
static void full_path(char *buf, size_t size, const struct tm_cfg_section *s,
                      const struct tm_cfg_keydef *k)
{
    if (s->path[0] == '\0')
        tm_snprintf(buf, size, "%s", k->name);
    else
        tm_snprintf(buf, size, "%s.%s", s->path, k->name);
}

/* section_named returns the section whose path is p, or NULL. */
static const struct tm_cfg_section *section_named(const char *p)
{
    const struct tm_cfg_section *s;
    for (size_t i = 0; (s = tm_cfg_section_at(i)) != NULL; i++)
        if (strcmp(s->path, p) == 0)
            return s;
    return NULL;
}

/* Every key of every section the reader walks is classified: reloadable,
 * restart-only (with the comparison a reload makes), or a section of
 * its own, which is in the table too. Adding a key to the reader without
 * a class fails here. */
START_TEST(every_key_is_classified)
{
    char path[256], star[260];
    const struct tm_cfg_section *s;
    size_t nsec = 0, nkeys = 0;
    for (size_t i = 0; (s = tm_cfg_section_at(i)) != NULL; i++, nsec++) {
        ck_assert_msg(s->nkeys > 0 && s->nkeys <= 32,
                      "section '%s': %zu keys (1 to 32: the reader's seen "
                      "set is 32 bits)", s->path, s->nkeys);
        for (size_t j = 0; j < s->nkeys; j++, nkeys++) {
            const struct tm_cfg_keydef *k = &s->keys[j];
            full_path(path, sizeof path, s, k);
            ck_assert_msg(k->name != NULL && k->name[0] != '\0',
                          "section '%s': key %zu has no name", s->path, j);
            for (size_t m = 0; m < j; m++)
                ck_assert_msg(strcmp(s->keys[m].name, k->name) != 0,
                              "%s is declared twice", path);
            switch (k->apply) {
            case TM_CFG_RELOAD:
                ck_assert_msg(k->differs == NULL, "%s: reloadable, yet "
                              "with a restart comparison", path);
                break;
            case TM_CFG_RESTART:
                ck_assert_msg(k->differs != NULL, "%s: restart-only "
                              "without a comparison", path);
                break;
            case TM_CFG_NESTED:
                tm_snprintf(star, sizeof star, "%s.*", path);
                ck_assert_msg(section_named(path) != NULL ||
                                  section_named(star) != NULL,
                              "%s: a section, but neither '%s' nor '%s' is "
                              "in the table", path, path, star);
                break;
            default:
                ck_abort_msg("%s: not classified (reloadable, restart-only "
                             "or a section)", path);
            }
        }
    }
    /* every section but the top is reached from a key */
    for (size_t i = 1; (s = tm_cfg_section_at(i)) != NULL; i++) {
        int reached = 0;
        const struct tm_cfg_section *o;
        for (size_t a = 0; (o = tm_cfg_section_at(a)) != NULL; a++) {
            for (size_t j = 0; j < o->nkeys; j++) {
                if (o->keys[j].apply != TM_CFG_NESTED)
                    continue;
                full_path(path, sizeof path, o, &o->keys[j]);
                tm_snprintf(star, sizeof star, "%s.*", path);
                if (strcmp(path, s->path) == 0 || strcmp(star, s->path) == 0)
                    reached = 1;
            }
        }
        ck_assert_msg(reached, "section '%s' is reached by no key", s->path);
    }
    ck_assert_str_eq(tm_cfg_section_at(0)->path, "");
    ck_assert_uint_ge(nsec, 10);
    ck_assert_uint_ge(nkeys, 60);
}
END_TEST

/* read_doc returns docs/operations.md of the source tree (TM_SRCDIR, or
 * the current directory), NUL-terminated. */
static char *read_doc(void)
{
    const char *src = getenv("TM_SRCDIR");
    char p[4096];
    tm_snprintf(p, sizeof p, "%s/docs/operations.md", src ? src : ".");
    FILE *f = fopen(p, "r");
    ck_assert_msg(f != NULL, "cannot open %s", p);
    size_t cap = 1 << 20, n;
    char *buf = malloc(cap + 1);
    ck_assert_ptr_nonnull(buf);
    n = fread(buf, 1, cap, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* The list of restart-only keys in docs/operations.md, between its
 * markers, one "- `KEY`" a line, is the table's restart-only keys. */
START_TEST(docs_list_the_restart_only_keys)
{
    static const char begin[] = "<!-- restart-only keys: begin -->";
    static const char end[] = "<!-- restart-only keys: end -->";
    char *doc = read_doc();
    char *b = strstr(doc, begin), *e = strstr(doc, end);
    ck_assert_msg(b != NULL && e != NULL && b < e,
                  "docs/operations.md: no '%s' ... '%s'", begin, end);
    *e = '\0';
    b += strlen(begin);
    size_t listed = 0;
    for (char *line = strtok(b, "\n"); line != NULL;
         line = strtok(NULL, "\n")) {
        if (line[0] == '\0')
            continue;
        char key[256];
        ck_assert_msg(sscanf(line, "- `%255[^`]`", key) == 1,
                      "docs/operations.md: '%s' is not \"- `KEY`\"", line);
        char path[256];
        int found = 0;
        const struct tm_cfg_section *s;
        for (size_t i = 0; (s = tm_cfg_section_at(i)) != NULL; i++) {
            for (size_t j = 0; j < s->nkeys; j++) {
                full_path(path, sizeof path, s, &s->keys[j]);
                if (strcmp(path, key) == 0)
                    found = s->keys[j].apply == TM_CFG_RESTART;
            }
        }
        ck_assert_msg(found, "docs/operations.md lists `%s`, which is not "
                      "a restart-only key", key);
        listed++;
    }
    size_t restart = 0;
    const struct tm_cfg_section *s;
    for (size_t i = 0; (s = tm_cfg_section_at(i)) != NULL; i++)
        for (size_t j = 0; j < s->nkeys; j++)
            restart += s->keys[j].apply == TM_CFG_RESTART;
    ck_assert_msg(listed == restart, "docs/operations.md lists %zu "
                  "restart-only keys, the table has %zu", listed, restart);
    free(doc);
}
END_TEST

/* A configuration compared with itself has no restart-only change; the
 * changes found are named by their full paths. */
START_TEST(changes_are_named_by_path)
{
    struct tm_cfg a, b;
    char buf[512];
    memset(&a, 0, sizeof a);
    a.broker_url = (char *)"redis://127.0.0.1:6379/0";
    a.tls.verify = true;
    a.pool_size = 4;
    b = a;
    ck_assert_uint_eq(tm_cfg_restart_changes(&a, &b, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "");
    b.tls.ca_file = (char *)"/etc/ca.pem";
    b.amqp_heartbeat_ms = 10000;
    b.pool_size = 8;
    b.http_token = (char *)"t";
    b.shutdown_timeout_ms = 1; /* reloadable: not named */
    ck_assert_uint_eq(tm_cfg_restart_changes(&a, &b, buf, sizeof buf), 4);
    ck_assert_str_eq(buf, "broker.tls.ca_file, broker.amqp.heartbeat, "
                          "pool.size, http.token");
    /* cut to the buffer, still counted */
    ck_assert_uint_eq(tm_cfg_restart_changes(&a, &b, buf, 12), 4);
    ck_assert_uint_lt(strlen(buf), 12);
}
END_TEST

static Suite *keys_suite(void)
{
    Suite *s = suite_create("config_keys");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, every_key_is_classified);
    tcase_add_test(tc, docs_list_the_restart_only_keys);
    tcase_add_test(tc, changes_are_named_by_path);
    suite_add_tcase(s, tc);
    return s;
}

TM_UNIT_MAIN(keys_suite)
