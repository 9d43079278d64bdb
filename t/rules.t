#!/usr/bin/perl
# Rule semantics through nginx: stacked rules with no partial consumption,
# ratelimit_combine any, inheritance, empty keys, dry run, cost variables,
# internal redirects and subrequests counted once, the variables.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new->start(<<'EOF'
ratelimit_zone z 1m;
ratelimit_zone other 64k;

log_format rl '$uri $status $ratelimit_status $ratelimit_rule $ratelimit_limit '
              '$ratelimit_remaining $ratelimit_reset $ratelimit_retry_after';
access_log %%PREFIX%%/rl.log rl;

# inherited by every server and location that has no rule of its own
ratelimit zone=z key=$http_x_user limit=2 period=1h name=http_level;

server {
    listen 127.0.0.1:%%PORT%%;

    location /inherit/ {
        alias %%PREFIX%%/html/;
    }
EOF
    . RLTest::locations(
        '/own/' => 'ratelimit zone=z key=$http_x_user limit=3 period=1h name=own;',
        # per user, and per address the user comes from; two zones
        '/stacked/' => 'ratelimit zone=z key=$http_x_user limit=5 period=1h name=per_user;
                        ratelimit zone=other key=$http_x_addr limit=2 period=1h name=per_addr;',
        '/any/' => 'ratelimit zone=z key=$http_x_user limit=1 period=1h name=free;
                    ratelimit zone=z key=$http_x_user limit=2 period=1h name=paid;
                    ratelimit_combine any;',
        '/exempt/' => 'ratelimit zone=z key=$http_x_key limit=1 period=1h name=keyed;',
        '/dry/' => 'ratelimit zone=z key=$http_x_user limit=2 period=1h name=dry; ratelimit_dry_run on;',
        '/cost/' => 'ratelimit zone=z key=$http_x_user limit=10 period=1h cost=$arg_c name=cost;',
        '/peek/' => 'ratelimit zone=z key=$http_x_user limit=10 period=1h cost=$arg_c name=peek zero_cost=on;')
    . <<'EOF');
    location /redirect/ {
        ratelimit zone=z key=$http_x_user limit=2 period=1h name=redirect;
        try_files /missing @named;
    }
    location @named {
        ratelimit zone=z key=$http_x_user limit=1 period=1h name=named;
        rewrite ^ /inner/index.html last;
    }
    location /inner/ {
        ratelimit zone=z key=$http_x_user limit=1 period=1h name=inner;
        alias %%PREFIX%%/html/;
    }

    # an auth_request subrequest to a limited location is not counted again
    location /sub/ {
        ratelimit zone=z key=$http_x_user limit=2 period=1h name=main;
        auth_request /check;
        alias %%PREFIX%%/html/;
    }
    location = /check {
        ratelimit zone=z key=$http_x_user limit=1 period=1h name=check;
        try_files /index.html =404;
    }
}
EOF

sub statuses {
    my ($path, $n, %h) = @_;
    return RLTest::statuses_of(map { $t->get_as($path, %h) } 1 .. $n);
}

# inheritance: http-level rule where a location has none; own rules replace it
is(statuses('/inherit/index.html', 3, User => 'i'), '200 200 429', 'inherited http-level rule');
is(statuses('/own/index.html', 4, User => 'o'), '200 200 200 429', 'own rule replaces the inherited one');
is($t->get_as('/inherit/index.html', User => 'i2')->{headers}{'x-ratelimit-limit'}, 2, 'inherited rule in headers');

# stacked: the per-address rule denies the 3rd request from address A; the
# per-user rule must have spent only the 2 admitted ones.
{
    is(statuses('/stacked/index.html', 4, User => 'u', Addr => 'A'), '200 200 429 429', 'stacked: address A spent');
    my $r = $t->get_as('/stacked/index.html', User => 'u', Addr => 'B');
    is($r->{status}, 200, 'stacked: same user from address B');
    is($r->{headers}{'x-ratelimit-remaining'}, 1, 'stacked: binding rule is per_addr (1 left)');
    $r = $t->get_as('/stacked/index.html', User => 'u', Addr => 'B');
    is($r->{headers}{'x-ratelimit-remaining'}, 0, 'stacked: address B spent too');
    is($t->get_as('/stacked/index.html', User => 'u', Addr => 'C')->{status}, 200,
       'stacked: the 5th for the user: denials consumed nothing of per_user');
    $r = $t->get_as('/stacked/index.html', User => 'u', Addr => 'D');
    is($r->{status}, 429, 'stacked: the 6th for the user is denied by per_user');
    is($r->{headers}{'retry-after'}, 720, 'stacked: per_user wait (1h / 5)');
}

# any: allowed while one rule allows; only allowing rules spend
{
    my @r = map { $t->get_as('/any/index.html', User => 'a') } 1 .. 4;
    is(join(' ', map { $_->{status} } @r), '200 200 429 429', 'any: free 1 + paid 2, overlapping');
    is($r[1]{headers}{'x-ratelimit-remaining'}, 0, 'any: binding rule among the allowing ones');
}

# an empty key exempts the request from the rule
{
    is(statuses('/exempt/index.html', 5), '200 200 200 200 200', 'empty key: exempt');
    is(statuses('/exempt/index.html', 2, Key => 'k'), '200 429', 'a key: limited');
    is($t->get_as('/exempt/index.html')->{headers}{'x-ratelimit-limit'}, undef, 'exempt: no headers');
}

# dry run: nothing rejected; denied requests consume nothing
{
    my @r = map { $t->get_as('/dry/index.html', User => 'd') } 1 .. 4;
    is(join(' ', map { $_->{status} } @r), '200 200 200 200', 'dry run: nothing rejected');
    is($r[3]{headers}{'x-ratelimit-remaining'}, 0, 'dry run: headers still describe the rule');
    is($r[3]{headers}{'retry-after'}, undef, 'dry run: no Retry-After');
}

# cost from a variable
{
    my $r = $t->get_as('/cost/index.html?c=7', User => 'c');
    is($r->{headers}{'x-ratelimit-remaining'}, 3, 'cost=$arg_c: 7 spent');
    $r = $t->get_as('/cost/index.html?c=0', User => 'c');
    is($r->{headers}{'x-ratelimit-remaining'}, 2, 'a cost variable\'s 0 counts as 1: no free pass');
    $r = $t->get_as('/cost/index.html?c=3', User => 'c');
    is($r->{status}, 429, 'cost 3 with 2 left: denied');
    for (1 .. 3) {
        $r = $t->get_as('/peek/index.html?c=0', User => 'p');
        is($r->{headers}{'x-ratelimit-remaining'}, 10, "zero_cost=on: 0 looks without spending ($_)");
    }
    $r = $t->get_as('/peek/index.html?c=10', User => 'p');
    is($r->{status}, 200, 'zero_cost=on: then all 10 are there');
    $r = $t->get_as('/peek/index.html?c=0', User => 'p');
    is("$r->{status} $r->{headers}{'x-ratelimit-remaining'}", '200 0', 'zero_cost=on: a peek at a spent key passes');
    for my $bad ('-1', 'abc', '99999999999999999999', '') {
        $r = $t->get_as("/cost/index.html?c=$bad", User => "bad-cost-$bad");
        is($r->{headers}{'x-ratelimit-remaining'}, 9, "cost \"$bad\" counts as 1");
    }
    $r = $t->get_as('/cost/index.html?c=11', User => 'c11');
    is($r->{status}, 429, 'cost above what the rule can ever admit: denied');
    is($r->{headers}{'x-ratelimit-remaining'}, 10, 'never-admissible cost consumes nothing');
    # each bad value logged, or counted in a folded line
    my ($lines, $folded) = $t->wait_folded(qr/rule "cost" in zone "z": cost "[^"]*" is not a non-negative integer, counted as 1/,
                                           qr/(\d+) more requests with a bad value \(see above\) by rule "cost"/, 4);
    is($lines + $folded, 4, "bad costs: $lines logged, $folded folded");
}

# internal redirects (try_files -> named location -> rewrite) count once,
# against the first location's rules only
{
    is(statuses('/redirect/x', 3, User => 'r'), '200 200 429', 'redirect chain counted once per request');
    my $r = $t->get_as('/redirect/x', User => 'r2');
    is($r->{content}, "ok\n", 'redirect: served by the inner location');
    is($r->{headers}{'x-ratelimit-limit'}, 2, 'redirect: headers of the first rule');
}

# subrequests are not counted: /check's own limit of 1 never applies
{
    my @r = map { $t->get_as('/sub/index.html', User => 's') } 1 .. 3;
    is(join(' ', map { $_->{status} } @r), '200 200 429', 'subrequest not counted');
    is($r[1]{headers}{'x-ratelimit-limit'}, 2, 'subrequest: headers of the main request\'s rule');
}

# the variables, in the access log
{
    $t->stop();   # flushes the log
    my $log = $t->file('rl.log');
    like($log, qr{^/inherit/index\.html 200 PASSED http_level 2 1 1800 0$}m, 'log: PASSED with rule, limit, remaining, reset');
    like($log, qr{^/inherit/index\.html 429 REJECTED http_level 2 0 3600 1800$}m, 'log: REJECTED with Retry-After');
    like($log, qr{^/dry/index\.html 200 REJECTED_DRY_RUN dry 2 0 3600 1800$}m, 'log: REJECTED_DRY_RUN');
    like($log, qr{^/exempt/index\.html 200 EXEMPT - - - - -$}m, 'log: EXEMPT, no rule');
    like($t->error_log, qr/ratelimit: would reject \(dry run\) by rule "dry"/, 'dry run rejections are logged');
}

done_testing();
