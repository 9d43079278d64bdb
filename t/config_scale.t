#!/usr/bin/perl
# A configuration generated a tenant a location: 1,000 locations with a
# rule each in one zone, their keys alternately a header and the client's
# address, each its own limit and name, and one name shared by two
# locations.  Each location limits at exactly its own limit and says it in
# X-RateLimit-Limit; the rules of one key written alike share its compiled
# code and still count apart; a location sending the IETF headers says its
# own policy; an override of one rule by name applies to that rule only,
# and to both locations of the shared name; a reload keeps what was spent.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $n = 1000;
my $t = RLTest->new();

# tenant i: limit 1 + i % 4 an hour, keyed on X-K (odd) or the address (even)
sub limit_of { 1 + $_[0] % 4 }

my $conf = "ratelimit_zone tenants 4m;\nserver {\n    listen 127.0.0.1:%%PORT%%;\n"
    . "    location /rl/ { ratelimit_api write=on; }\n"
    . "    location = /stats { ratelimit_stats; }\n";
for my $i (1 .. $n) {
    my $key = $i % 2 ? '$http_x_k' : '$binary_remote_addr';
    my $headers = $i == 42 ? ' ratelimit_headers both;' : '';
    $conf .= sprintf "    location /t%d/ { ratelimit zone=tenants key=%s limit=%d period=1h name=tenant%d;%s"
        . " alias %%%%PREFIX%%%%/html/; }\n", $i, $key, limit_of($i), $i, $headers;
}
$conf .= "    location /shared_a/ { ratelimit zone=tenants key=\$http_x_k limit=2 period=1h name=shared;"
    . " alias %%PREFIX%%/html/; }\n"
    . "    location /shared_b/ { ratelimit zone=tenants key=\$http_x_k limit=2 period=1h name=shared;"
    . " alias %%PREFIX%%/html/; }\n}\n";
$t->start($conf, log_level => 'error');

# admitted requests in a row until the first refusal (at most $max), and
# the X-RateLimit-Limit of the first
sub admitted {
    my ($path, $key, $max) = @_;
    my ($ok, $limit) = (0, undef);
    for (1 .. $max) {
        my $r = $t->get($path, { 'X-K' => $key });
        $limit //= $r->{headers}{'x-ratelimit-limit'};
        last unless $r->{status} == 200;
        $ok++;
    }
    return ($ok, $limit);
}

for my $i (1, 2, 3, 4, 42, 499, 500, 777, 998, 999, $n) {
    my ($ok, $limit) = admitted("/t$i/index.html", 'k1', 8);
    is($ok, limit_of($i), "tenant$i: exactly its limit " . limit_of($i) . ' admitted');
    is($limit, limit_of($i), "tenant$i: X-RateLimit-Limit $limit");
}

# a key shared by the odd tenants' rules: each counts apart
is((admitted('/t5/index.html', 'k2', 8))[0], limit_of(5), 'tenant5, another key: its own count');
is((admitted('/t7/index.html', 'k2', 8))[0], limit_of(7), 'tenant7, the same key: counted apart from tenant5');

# the IETF headers where asked for: the location's own policy
my $r = $t->get('/t42/index.html', { 'X-K' => 'k3' });
like($r->{headers}{'ratelimit-policy'} // '', qr/^"tenant42";q=3;w=3600$/, 'tenant42: its RateLimit-Policy');
$r = $t->get('/t43/index.html', { 'X-K' => 'k3' });
ok(!defined $r->{headers}{'ratelimit-policy'}, 'tenant43: no RateLimit-Policy (legacy headers)');

# an override by rule name among 1,000 names
$r = $t->request('PUT', '/rl/zones/tenants/overrides?key=k4&rule=tenant777', {}, '{"limit":6}');
is($r->{status}, 200, 'override of tenant777 for k4') or diag($r->{content});
is((admitted('/t777/index.html', 'k4', 10))[0], 6, 'tenant777, k4: the override\'s 6');
is((admitted('/t779/index.html', 'k4', 10))[0], limit_of(779), 'tenant779, k4: its own limit');

# a name two locations share: one state, one override
$r = $t->request('PUT', '/rl/zones/tenants/overrides?key=k5&rule=shared', {}, '{"limit":3}');
is($r->{status}, 200, 'override of shared for k5') or diag($r->{content});
is((admitted('/shared_a/index.html', 'k5', 10))[0], 3, 'shared, first location: the override\'s 3');
is((admitted('/shared_b/index.html', 'k5', 10))[0], 0, 'shared, second location: the same state, spent');
is((admitted('/shared_b/index.html', 'k6', 10))[0], 2, 'shared, another key: the rule\'s 2');

# every name counted apart, in the JSON stats (the dashboard's source),
# Prometheus, and the key API (GET /stats makes no request of a rule)
for my $i (1 .. $n) {
    $t->get("/t$i/index.html", { 'X-K' => 'k8' }) for 1 .. ($i % 3 ? 1 : 2);
}
my $stats = $t->stats();
my $rules = $stats->{zones}{tenants}{rules};
is(scalar(grep { /^tenant\d+$/ } keys %$rules), $n, "the JSON stats: all $n names of the zone");
my %earlier = map { $_ => 1 } 1, 2, 3, 4, 5, 7, 42, 43, 499, 500, 777, 779, 998, 999, $n;
my @wrong = grep {
    my $r = $rules->{"tenant$_"};
    !$r || $r->{allowed} + $r->{rejected} != ($_ % 3 ? 1 : 2)
} grep { !$earlier{$_} } 1 .. $n;
is("@wrong", '', 'the JSON stats: each name its own requests');
is($rules->{tenant8}{allowed}, 1, 'tenant8: 1 allowed');
is($rules->{tenant9}{allowed}, 2, 'tenant9: 2 allowed');
ok($rules->{tenant777}{overridden} >= 7, 'tenant777: the requests that met its override counted');
ok($rules->{shared}, 'the shared name: counted once');
my $prom = $t->get('/stats?format=prometheus')->{content};
my %seen = $prom =~ /^nginx_ratelimit_allowed_total\{zone="tenants",rule="(tenant\d+)"\} (\d+)$/mg;
is(scalar(keys %seen), $n, "Prometheus: all $n names");
is($seen{tenant8}, 1, 'Prometheus: tenant8\'s allowed');
is($seen{tenant999}, $rules->{tenant999}{allowed}, 'Prometheus: tenant999 as in the JSON');
my $keys = $t->get('/rl/zones/tenants/keys?key=k8&rule=tenant999');
is($keys->{status}, 200, 'the key API: k8 in tenant999');
like($keys->{content}, qr/tenant999/, 'the key API: the state of k8 in tenant999');
my $top = $t->get('/rl/zones/tenants/top?rule=tenant1000');
like($top->{content}, qr/"tenant1000"/, 'the key API: the keys tenant1000 refuses most');
my $all = $t->get('/rl/zones/tenants/top')->{content};
is(scalar(() = $all =~ /"tenant\d+":\{/g), $n, "the key API: the top keys of all $n names");

# a reload keeps the zone and what was spent
$t->reload();
is((admitted('/t3/index.html', 'k1', 8))[0], 0, 'after a reload: tenant3\'s k1 still spent');
is((admitted('/t3/index.html', 'k7', 8))[0], limit_of(3), 'after a reload: tenant3 limits a new key at 4');

$t->stop();
done_testing();
