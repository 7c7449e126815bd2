/* result.c - test plugin: sets the result its body names, valid or not.
 *
 * Body {"give": WHAT}, WHAT one of:
 *   "object"   {"ok":true}               valid
 *   "array"    [1,2]                     valid JSON, not an object
 *   "broken"   {not json                 not JSON
 *   "trailing" {"ok":true} x             not JSON (text after the value)
 *   "badutf8"  {"s":"\xff"}              not UTF-8
 *   "empty"    (zero bytes)              not JSON
 *   "nul"      {"s":1} then a NUL byte   not JSON (the NUL is inside len)
 * The body is matched by substring: the test sends exactly these forms.
 */
#include <string.h>

#include <taskmill.h>

static int cb_run(struct tm_call *call)
{
    static const struct {
        const char *give;
        const char *text;
        size_t len;
    } forms[] = {
        {"\"object\"", "{\"ok\":true}", 11},
        {"\"array\"", "[1,2]", 5},
        {"\"broken\"", "{not json", 9},
        {"\"trailing\"", "{\"ok\":true} x", 13},
        {"\"badutf8\"", "{\"s\":\"\xff\"}", 9},
        {"\"empty\"", "", 0},
        {"\"nul\"", "{\"s\":1}\0", 8},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (strstr(call->body, forms[i].give) == NULL)
            continue;
        if (call->host->set_result(call, forms[i].text, forms[i].len) != 0) {
            tm_error(call, "set_result refused the text");
            return TM_TASK_ERROR;
        }
        return TM_TASK_OK;
    }
    tm_error(call, "unknown \"give\"");
    return TM_TASK_REJECT;
}

TM_TASK_DECLARE(
    .name = "test-result",
    .version = "0.0.1",
    .description = "test plugin: sets the result its body names",
    .cb_run = cb_run,
)
