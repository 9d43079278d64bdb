#!/usr/bin/perl
# README's example, followed as written: the whole nginx.conf at the top
# (load_module at the Debian package's path, its own backend).  The only
# changes made to it (RLTest::doc_conf): the module's path (the one under
# test), the main context's paths, and ports (free ones).  The recipes of
# docs/recipes.md are run by t/recipes.t, every other example of README.md
# and docs/ passes nginx -t in t/docs.t.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my %blocks = RLTest::doc_blocks('README.md', '##');

# --- the example at the top: a whole nginx.conf
{
    my $conf = $blocks{top}[0] // BAIL_OUT('no nginx example at the top of README.md');
    like($conf, qr{^load_module /usr/lib/nginx/modules/ngx_http_ratelimit_module\.so;$}m,
         'top: load_module names where the Debian package installs the module');
    like($conf, qr/^\s*upstream backend \{/m, 'top: it defines the backend it proxies to');

    my $t = RLTest->new();
    $t->put_file('nginx.conf', $t->doc_conf($conf));
    $t->start();

    my $r = $t->get('/api/users', { 'X-Api-Key' => 'k1' });
    is($r->{status}, 200, 'top: a request passes');
    is($r->{content}, "backend\n", 'top: proxied to the backend');
    is($r->{headers}{'x-ratelimit-limit'}, 100, 'top: the binding rule is the per-address one');
    is($r->{headers}{'x-ratelimit-remaining'}, 19, 'top: 20 at once, one spent');
    $r = $t->get('/api/users');
    is($r->{status}, 200, 'top: no API key: the key rule exempts it, the address rule applies');
    is($r->{headers}{'x-ratelimit-remaining'}, 18, 'top: the same address, two spent');
    $t->stop();
}

done_testing();
