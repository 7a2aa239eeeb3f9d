/* hearth tokenize: text to ids and back with a model's tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fileio.h"
#include "base/hex.h"
#include "cli/cli.h"
#include "tokenizer/tokenizer.h"

static void tokenize_usage(void)
{
    fprintf(stderr,
            "usage: hearth tokenize (--model DIR | --tokenizer FILE) [options] [TEXT...]\n"
            "Prints the token ids of TEXT (several arguments are joined with spaces; none, or '-',\n"
            "reads standard input), space-separated on one line.\n"
            "  --model DIR       a model directory holding tokenizer.json\n"
            "  --tokenizer FILE  a tokenizer.json\n"
            "  --decode          the arguments (or standard input) are ids: print their text\n"
            "  --skip-special    with --decode: leave out special tokens\n"
            "  --no-special      do not add the post-processor's special tokens (Qwen3 adds none)\n"
            "  --tokens          print one 'id<TAB>token' line per token instead\n"
            "  --batch-hex FILE  each line of FILE is the hex of one input; print one line per input:\n"
            "                    its ids, or 'ERR <message>' (used by the differential tests)\n"
            "  --batch-decode FILE  each line of FILE holds ids; print the hex of each decoded text\n");
}

static char *read_stream(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
            cap *= 2;
        }
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static void print_ids(const struct tokenizer_ids *ids)
{
    for (size_t k = 0; k < ids->n; k++)
        printf(k ? " %d" : "%d", ids->ids[k]);
    putchar('\n');
}

static int run_batch(const struct tokenizer *tk, const char *path, bool add_special)
{
    char err[HR_ERRLEN];
    char *text;
    size_t len;
    if (fileio_read_all(path, 0, &text, &len, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth tokenize: %s\n", err);
        return 1;
    }
    struct tokenizer_ids ids = {0};
    char *bytes = malloc(len / 2 + 1);
    if (!bytes) {
        free(text);
        return 1;
    }
    int rc = 0;
    for (char *line = text; line < text + len;) {
        char *eol = memchr(line, '\n', (size_t)(text + len - line));
        if (!eol)
            eol = text + len;
        size_t n = 0;
        bool ok = true;
        for (char *p = line; p + 1 < eol + 1 && p < eol; p += 2) {
            int hi = hex_digit((unsigned char)p[0]), lo = p + 1 < eol ? hex_digit((unsigned char)p[1]) : -1;
            if (hi < 0 || lo < 0) {
                ok = false;
                break;
            }
            bytes[n++] = (char)(hi << 4 | lo);
        }
        if (!ok) {
            printf("ERR bad hex line\n");
            rc = 1;
        } else {
            ids.n = 0;
            enum hr_status st = tokenizer_encode_ex(tk, bytes, n, add_special, &ids, err, sizeof err);
            if (st == HR_OK)
                print_ids(&ids);
            else
                printf("ERR %s: %s\n", hr_status_str(st), err);
        }
        line = eol + 1;
    }
    free(bytes);
    free(text);
    tokenizer_ids_free(&ids);
    return rc;
}

static int run_batch_decode(const struct tokenizer *tk, const char *path, bool skip_special)
{
    char err[HR_ERRLEN];
    char *text;
    size_t len;
    if (fileio_read_all(path, 0, &text, &len, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth tokenize: %s\n", err);
        return 1;
    }
    struct tokenizer_ids ids = {0};
    int rc = 0;
    for (char *line = text; line < text + len;) {
        char *eol = memchr(line, '\n', (size_t)(text + len - line));
        if (!eol)
            eol = text + len;
        *eol = 0;
        ids.n = 0;
        for (char *p = line; *p;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            if (tokenizer_ids_push(&ids, (int32_t)v, err, sizeof err) != HR_OK) {
                free(text);
                tokenizer_ids_free(&ids);
                return 1;
            }
            p = end;
        }
        char *out;
        size_t n;
        if (tokenizer_decode(tk, ids.ids, ids.n, skip_special, &out, &n, err, sizeof err) == HR_OK) {
            for (size_t k = 0; k < n; k++)
                printf("%02x", (unsigned char)out[k]);
            putchar('\n');
            free(out);
        } else {
            printf("ERR %s\n", err);
            rc = 1;
        }
        line = eol + 1;
    }
    free(text);
    tokenizer_ids_free(&ids);
    return rc;
}

static int run_decode(const struct tokenizer *tk, int argc, char **argv, int first, bool skip_special)
{
    struct tokenizer_ids ids = {0};
    char err[HR_ERRLEN];
    char *in = NULL;
    size_t in_len = 0;
    if (first >= argc || (first == argc - 1 && !strcmp(argv[first], "-"))) {
        in = read_stream(stdin, &in_len);
        if (!in) {
            fprintf(stderr, "hearth tokenize: out of memory\n");
            return 1;
        }
    }
    int rc = 0;
    for (int a = first; rc == 0 && (in ? a == first : a < argc); a++) {
        const char *p = in ? in : argv[a];
        while (*p) {
            while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')
                p++;
            if (!*p)
                break;
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || v < INT32_MIN || v > INT32_MAX) {
                fprintf(stderr, "hearth tokenize: '%.20s' is not a token id\n", p);
                rc = 2;
                break;
            }
            if (tokenizer_ids_push(&ids, (int32_t)v, err, sizeof err) != HR_OK) {
                fprintf(stderr, "hearth tokenize: %s\n", err);
                rc = 1;
                break;
            }
            p = end;
        }
    }
    free(in);
    if (rc == 0) {
        char *text;
        size_t len;
        if (tokenizer_decode(tk, ids.ids, ids.n, skip_special, &text, &len, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth tokenize: %s\n", err);
            rc = 1;
        } else {
            fwrite(text, 1, len, stdout);
            putchar('\n');
            free(text);
        }
    }
    tokenizer_ids_free(&ids);
    return rc;
}

int cli_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *batch = NULL, *batch_decode = NULL;
    bool decode = false, skip_special = false, add_special = true, tokens = false;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage();
            return 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--tokenizer") || !strcmp(a, "--batch-hex") ||
                   !strcmp(a, "--batch-decode")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "hearth tokenize: %s needs a value\n", a);
                return 2;
            }
            const char **dst = !strcmp(a, "--model")       ? &model
                               : !strcmp(a, "--tokenizer") ? &file
                               : !strcmp(a, "--batch-hex") ? &batch
                                                           : &batch_decode;
            *dst = argv[++i];
        } else if (!strcmp(a, "--decode")) {
            decode = true;
        } else if (!strcmp(a, "--skip-special")) {
            skip_special = true;
        } else if (!strcmp(a, "--no-special")) {
            add_special = false;
        } else if (!strcmp(a, "--tokens")) {
            tokens = true;
        } else if (!strcmp(a, "--")) {
            i++;
            break;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "hearth tokenize: unknown option '%s'\n", a);
            tokenize_usage();
            return 2;
        } else {
            break;
        }
    }
    if (!model == !file) {
        fprintf(stderr, "hearth tokenize: give exactly one of --model DIR or --tokenizer FILE\n");
        tokenize_usage();
        return 2;
    }
    char path[4096], err[HR_ERRLEN];
    if (model) {
        if (fileio_join(path, sizeof path, model, "tokenizer.json", err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth tokenize: %s\n", err);
            return 2;
        }
        file = path;
    }
    struct tokenizer tk;
    if (tokenizer_init(&tk, file, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hearth tokenize: %s\n", err);
        return 1;
    }
    int rc = 0;
    if (batch) {
        rc = run_batch(&tk, batch, add_special);
    } else if (batch_decode) {
        rc = run_batch_decode(&tk, batch_decode, skip_special);
    } else if (decode) {
        rc = run_decode(&tk, argc, argv, i, skip_special);
    } else {
        char *text = NULL;
        size_t len = 0;
        if (i >= argc || (i == argc - 1 && !strcmp(argv[i], "-"))) {
            text = read_stream(stdin, &len);
        } else {
            for (int a = i; a < argc; a++)
                len += strlen(argv[a]) + 1;
            text = malloc(len + 1);
            if (text) {
                size_t o = 0;
                for (int a = i; a < argc; a++) {
                    if (a > i)
                        text[o++] = ' ';
                    memcpy(text + o, argv[a], strlen(argv[a]));
                    o += strlen(argv[a]);
                }
                text[o] = 0;
                len = o;
            }
        }
        struct tokenizer_ids ids = {0};
        if (!text) {
            fprintf(stderr, "hearth tokenize: out of memory\n");
            rc = 1;
        } else if (tokenizer_encode_ex(&tk, text, len, add_special, &ids, err, sizeof err) != HR_OK) {
            fprintf(stderr, "hearth tokenize: %s\n", err);
            rc = 1;
        } else if (tokens) {
            for (size_t k = 0; k < ids.n; k++) {
                size_t tl = 0;
                const char *t = tokenizer_token_str(&tk, ids.ids[k], &tl);
                printf("%d\t%.*s\n", ids.ids[k], (int)tl, t ? t : "");
            }
        } else {
            print_ids(&ids);
        }
        free(text);
        tokenizer_ids_free(&ids);
    }
    tokenizer_free(&tk);
    return rc;
}
