package RLCerts;
# Certificates for tests of TLS, made with the openssl command in a
# temporary directory: a CA, a server certificate it signed (for
# redis.test, localhost and 127.0.0.1), a client certificate it signed, and
# a second CA that signed nothing of these.
#
#   my $c = RLCerts::make();            # undef if there is no openssl
#   $c->{ca}, $c->{server_crt}, $c->{server_key}, $c->{client_crt},
#   $c->{client_key}, $c->{other_ca}, $c->{dir}
use strict;
use warnings;
use File::Temp qw(tempdir);

sub openssl {
    my ($dir, @args) = @_;
    my $out = `cd '$dir' && openssl @args 2>&1`;
    die "RLCerts: openssl @args: $out\n" if $?;
}

sub signed {
    my ($dir, $name, $cn, $ext) = @_;
    open(my $fh, '>', "$dir/$name.ext") or die "RLCerts: $dir/$name.ext: $!\n";
    print $fh "$ext\n";
    close $fh;
    openssl($dir, "req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $name.key"
                . " -out $name.csr -subj /CN=$cn");
    openssl($dir, "x509 -req -in $name.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650"
                . " -out $name.crt -extfile $name.ext");
}

# Another server certificate of the CA in $c, for $san ("DNS:a,IP:b"): the
# tls hash of RLRedis, with this certificate.
sub server {
    my ($c, $name, $san) = @_;
    signed($c->{dir}, $name, $name, "subjectAltName=$san\nextendedKeyUsage=serverAuth,clientAuth");
    chmod 0644, "$c->{dir}/$name.key";
    return { %$c, server_crt => "$c->{dir}/$name.crt", server_key => "$c->{dir}/$name.key" };
}

sub make {
    return undef if system('openssl version >/dev/null 2>&1') != 0;
    my $dir = tempdir('ngx-ratelimit-certs-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    for my $ca (qw(ca other_ca)) {
        openssl($dir, "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650"
                    . " -keyout $ca.key -out $ca.crt -subj /CN=ratelimit-test-$ca");
    }
    signed($dir, 'server', 'redis.test',
           "subjectAltName=DNS:redis.test,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth");
    signed($dir, 'client', 'nginx-client', 'extendedKeyUsage=clientAuth');
    chmod 0644, glob "$dir/*.key";
    return { dir => $dir, ca => "$dir/ca.crt", other_ca => "$dir/other_ca.crt",
             server_crt => "$dir/server.crt", server_key => "$dir/server.key",
             client_crt => "$dir/client.crt", client_key => "$dir/client.key" };
}

1;
