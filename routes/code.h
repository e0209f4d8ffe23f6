#pragma once
/* Agent runs: POST /code (a snippet in a language with its input files,
 * answered with the ShellResult and files_changed), built as a POST /exec
 * with track_changes (routes/exec_extras.h) and run through exec's own
 * handler. HTTP threads, except the file work (POST /code's inputs),
 * which runs on the file pool. */
#include <jansson.h>

struct app;

/* The languages POST /code can run now: their interpreters, configured
 * (code-languages) and installed where the sandbox sees them (/readyz). */
json_t *route_code_languages(const struct app *a);
