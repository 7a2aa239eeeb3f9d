#ifndef HEARTH_BASE_HEX_H
#define HEARTH_BASE_HEX_H

/* The value of one hexadecimal digit, or -1 when c is not one (JSON, template,
 * grammar and CLI escapes all read \xHH / \uHHHH this way). */
static inline int hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
