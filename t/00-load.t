#!/usr/bin/perl
# The module loads into nginx: by default Debian's unmodified packaged nginx
# with load_module; RL_NGINX and RL_MODULE select another build (a .so built
# against another nginx's source, a Debian modules-enabled file, or "static":
# compiled into RL_NGINX).
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new();
my $nginx = $t->nginx;
my $module = $t->module;

my $v = `$nginx -V 2>&1`;
if ($module eq 'static') {
    like($v, qr/--add-module=\S+/, "$nginx has the module compiled in (--add-module)");
} else {
    like($v, qr/--with-compat/, "$nginx is a --with-compat build");
}

my $body = <<'EOF';
ratelimit_zone z 1m;
server {
    listen 127.0.0.1:%%PORT%%;
    location / { ratelimit zone=z limit=100 period=1m; }
}
EOF
my $conf = $t->conf_text($body);
if ($module eq 'static') {
    unlike($conf, qr/load_module/, 'nothing loaded');
} elsif ($module =~ /\.conf$/) {
    like($conf, qr/^include \Q$module\E;/m, 'loaded through its modules-enabled file');
} else {
    like($conf, qr/^load_module \S+ngx_http_ratelimit_module\.so;/m, 'loaded with load_module');
}
my ($rc, $out) = $t->nginx_t($conf);
is($rc, 0, 'nginx -t accepts the module and its directives');
like($out, qr/syntax is ok.*test is successful/s, 'nginx -t output');

$t->start($body);
my $r = $t->get('/index.html');
is($r->{status}, 200, 'a request passes');
is($r->{content}, "ok\n", 'and is served');
is($r->{headers}{'x-ratelimit-remaining'}, 99, 'with the rate-limit headers');
$t->stop();

done_testing();
